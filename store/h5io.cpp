// h5io.cpp — RAII HDF5 helpers: atomic commit, typed and shape-checked dataset I/O, attributes.
#include "store/h5io.h"
#include "store/path_checks.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace moerl {

namespace {

// Owns one HDF5 identifier and closes it with the matching H5?close.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// HDF5 prints its error stack to stderr by default; we report it inside our exceptions instead.
void h5_silence() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

herr_t collect_error(unsigned, const H5E_error2_t* err, void* data) {
  auto* v = static_cast<std::vector<std::string>*>(data);
  if (err->desc && *err->desc) v->push_back(err->desc);
  return 0;
}

// HDF5's own diagnosis of the last failed call (deepest entries first), then clears the stack.
// Must be called before any other HDF5 API call, which would reset the stack.
std::string h5_detail() {
  std::vector<std::string> descs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &descs);
  H5Eclear2(H5E_DEFAULT);
  if (descs.empty()) return "";
  std::string s = " (HDF5: ";
  int shown = 0;
  for (auto it = descs.rbegin(); it != descs.rend() && shown < 3; ++it, ++shown) {
    if (shown) s += " <- ";
    s += *it;
  }
  return s + ")";
}

hid_t file_type(H5Type t) {
  switch (t) {
    case H5Type::f32: return H5T_IEEE_F32LE;
    case H5Type::f64: return H5T_IEEE_F64LE;
    case H5Type::i32: return H5T_STD_I32LE;
    case H5Type::i64: return H5T_STD_I64LE;
  }
  return -1;
}

hid_t mem_type(H5Type t) {
  switch (t) {
    case H5Type::f32: return H5T_NATIVE_FLOAT;
    case H5Type::f64: return H5T_NATIVE_DOUBLE;
    case H5Type::i32: return H5T_NATIVE_INT32;
    case H5Type::i64: return H5T_NATIVE_INT64;
  }
  return -1;
}

// Classifies a stored type; false when it is none of H5Type. *desc gets a readable name either way.
bool classify(hid_t type, H5Type* out, std::string* desc) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) {
    *desc = "float" + std::to_string(8 * size);
    if (size == 4) { *out = H5Type::f32; return true; }
    if (size == 8) { *out = H5Type::f64; return true; }
    return false;
  }
  if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    *desc = (is_signed ? "int" : "uint") + std::to_string(8 * size);
    if (is_signed && size == 4) { *out = H5Type::i32; return true; }
    if (is_signed && size == 8) { *out = H5Type::i64; return true; }
    return false;
  }
  if (cls == H5T_STRING) *desc = "string";
  else *desc = "HDF5 type class " + std::to_string(static_cast<int>(cls));
  return false;
}

std::vector<hsize_t> to_hsize(const std::vector<int64_t>& v) {
  return std::vector<hsize_t>(v.begin(), v.end());
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Chunks of at most ~1 MiB, cut along the leading dimensions (block writes go along dim 0).
std::vector<hsize_t> chunk_dims(const std::vector<int64_t>& shape, int64_t elem_bytes) {
  constexpr int64_t kBudget = int64_t{1} << 20;
  std::vector<hsize_t> chunk(shape.begin(), shape.end());
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t rest = elem_bytes;
    for (size_t j = i + 1; j < shape.size(); ++j) rest *= shape[j];
    if (rest * shape[i] <= kBudget) break;
    chunk[i] = static_cast<hsize_t>(std::max<int64_t>(1, std::min(shape[i], kBudget / rest)));
    if (rest <= kBudget) break;
  }
  return chunk;
}

std::string strip_slash(const std::string& name) {
  size_t i = 0;
  while (i < name.size() && name[i] == '/') ++i;
  return name.substr(i);
}

herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

}  // namespace

const char* h5_type_name(H5Type t) {
  switch (t) {
    case H5Type::f32: return "float32";
    case H5Type::f64: return "float64";
    case H5Type::i32: return "int32";
    case H5Type::i64: return "int64";
  }
  return "?";
}

std::string h5_shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// ---- life cycle --------------------------------------------------------------------------------

H5File::H5File(std::string path, std::string tmp_path, hid_t id, bool writable, int fd)
    : path_(std::move(path)), tmp_path_(std::move(tmp_path)), id_(id), writable_(writable),
      fd_(fd) {}

H5File::H5File(H5File&& o) noexcept
    : path_(std::move(o.path_)), tmp_path_(std::move(o.tmp_path_)), id_(o.id_),
      writable_(o.writable_), fd_(o.fd_) {
  o.id_ = -1;
  o.fd_ = -1;
  o.tmp_path_.clear();
}

H5File& H5File::operator=(H5File&& o) noexcept {
  if (this != &o) {
    close_quietly();
    path_ = std::move(o.path_);
    tmp_path_ = std::move(o.tmp_path_);
    id_ = o.id_;
    writable_ = o.writable_;
    fd_ = o.fd_;
    o.id_ = -1;
    o.fd_ = -1;
    o.tmp_path_.clear();
  }
  return *this;
}

H5File::~H5File() { close_quietly(); }

void H5File::close_quietly() {
  if (id_ >= 0) {
    H5Fclose(id_);
    H5Eclear2(H5E_DEFAULT);
    id_ = -1;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (writable_ && !tmp_path_.empty()) {
    ::unlink(tmp_path_.c_str());
    tmp_path_.clear();
  }
}

void H5File::fail(const std::string& object, const std::string& what) const {
  const std::string detail = h5_detail();
  if (object.empty()) throw H5Error(path_ + ": " + what + detail);
  throw H5Error(path_ + ": " + object + ": " + what + detail);
}

namespace {
// File access: closing the file closes every object still open in it ("strong"), so commit()
// really releases the file before renaming it.
hid_t strong_close_fapl() {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
  return fapl;
}

// Writers build the file in memory (HDF5's core driver without backing store), so HDF5 itself never
// writes to disk: commit() writes the finished image with plain POSIX calls, so a full disk or a
// file-size limit is one errno for us to report, never a half-closed HDF5 file that the library
// tries (and fails, fatally) to flush again at exit.
hid_t memory_fapl() {
  hid_t fapl = strong_close_fapl();
  H5Pset_fapl_core(fapl, 1 << 20, 0);
  return fapl;
}

// Writes all of buf to fd; false with errno set on failure.
bool write_all(int fd, const char* buf, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, buf, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (w == 0) {
      errno = EIO;
      return false;
    }
    buf += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// True when "<base>.tmp-<digits>" names a temporary of `base` whose process is gone.
bool is_stale_temporary(const std::string& name, const std::string& base) {
  const std::string prefix = base + ".tmp-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return false;
  if (digits.size() > 9) return true;
  const long pid = std::stol(digits);
  if (pid == static_cast<long>(::getpid())) return false;  // our own: the caller truncates it
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}
}  // namespace

namespace {
// CRC-32 as zlib computes it (polynomial 0xEDB88320), so Python checks it with zlib.crc32.
uint32_t crc32_update(uint32_t crc, const char* data, size_t n) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i)
    crc = table[(crc ^ static_cast<unsigned char>(data[i])) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

constexpr size_t kHeaderBytes = 512;  // HDF5 finds its superblock after a 512-byte user block
constexpr const char* kHeaderMagic = "moerl-integrity 1\n";

std::string format_header(uint64_t size, uint32_t crc) {
  char text[128];
  std::snprintf(text, sizeof text, "%ssize %llu\ncrc32 %08x\n", kHeaderMagic,
                static_cast<unsigned long long>(size), crc);
  std::string h(kHeaderBytes, '\0');
  std::memcpy(h.data(), text, std::strlen(text));
  return h;
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}
}  // namespace

std::string integrity_header(const char* image, size_t n) {
  return format_header(kHeaderBytes + n, crc32_update(0, image, n));
}

void h5_verify_integrity(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw H5Error(path + ": cannot open: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::string head(kHeaderBytes, '\0');
  const ssize_t got = ::pread(fd, head.data(), kHeaderBytes, 0);
  if (got < 0) throw H5Error(path + ": cannot read: " + std::strerror(errno));
  head.resize(static_cast<size_t>(got));
  static const char kSignature[] = "\x89HDF\r\n\x1a\n";
  if (head.compare(0, 8, kSignature, 8) == 0) return;  // no header: a file from another writer
  const bool ours = starts_with(head, kHeaderMagic);
  if (!ours) {
    // Damage to the header's first line must not turn a checked file into an unchecked one.
    char sig[8] = {};
    if (::pread(fd, sig, 8, static_cast<off_t>(kHeaderBytes)) == 8 && std::memcmp(sig, kSignature, 8) == 0)
      throw H5Error(path + ": corrupted: the 512-byte header before the HDF5 data is not a moerl "
                    "integrity header");
    return;  // not HDF5 at all: open() says so
  }
  if (head.size() < kHeaderBytes)
    throw H5Error(path + ": truncated file: " + std::to_string(head.size()) +
                  " bytes, shorter than its integrity header");
  unsigned long long size = 0;
  unsigned crc = 0;
  int used = 0;
  const std::string body = head.substr(std::strlen(kHeaderMagic));
  if (std::sscanf(body.c_str(), "size %llu\ncrc32 %8x\n%n", &size, &crc, &used) != 2 || used == 0 ||
      head != format_header(size, crc))
    throw H5Error(path + ": corrupted: damaged integrity header");
  struct stat st;
  if (::fstat(fd, &st) != 0) throw H5Error(path + ": cannot stat: " + std::strerror(errno));
  if (static_cast<unsigned long long>(st.st_size) != size)
    throw H5Error(path + ": " + (static_cast<unsigned long long>(st.st_size) < size ? "truncated" : "corrupted") +
                  " file: " + std::to_string(st.st_size) + " bytes, written with " +
                  std::to_string(size));
  std::vector<char> buf(1 << 20);
  uint32_t c = 0;
  off_t off = static_cast<off_t>(kHeaderBytes);
  while (static_cast<unsigned long long>(off) < size) {
    const ssize_t r = ::pread(fd, buf.data(), buf.size(), off);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw H5Error(path + ": cannot read: " + std::strerror(errno));
    }
    if (r == 0) break;
    c = crc32_update(c, buf.data(), static_cast<size_t>(r));
    off += r;
  }
  if (c != crc) {
    char msg[160];
    std::snprintf(msg, sizeof msg, ": corrupted: CRC-32 of the content is %08x, written as %08x "
                  "(the file changed after it was written)", c, crc);
    throw H5Error(path + msg);
  }
}

void h5_seal_file(const std::string& path) {
  std::vector<char> bytes;
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw H5Error(path + ": cannot open: " + std::strerror(errno));
    char buf[1 << 16];
    ssize_t r;
    while ((r = ::read(fd, buf, sizeof buf)) > 0) bytes.insert(bytes.end(), buf, buf + r);
    ::close(fd);
  }
  if (bytes.size() < kHeaderBytes || !starts_with(std::string(bytes.data(), 32), kHeaderMagic))
    throw H5Error(path + ": has no moerl integrity header to renew");
  const std::string h = integrity_header(bytes.data() + kHeaderBytes, bytes.size() - kHeaderBytes);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::pwrite(fd, h.data(), h.size(), 0) != static_cast<ssize_t>(h.size()))
    throw H5Error(path + ": cannot rewrite its integrity header: " + std::strerror(errno));
  ::close(fd);
}

int remove_stale_temporaries(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    if (is_stale_temporary(e->d_name, base) && ::unlink((dir + "/" + e->d_name).c_str()) == 0)
      ++removed;
  }
  ::closedir(d);
  return removed;
}

std::string temporary_path(const std::string& path) {
  return path + ".tmp-" + std::to_string(static_cast<long>(::getpid()));
}

namespace {
// Clears stale temporaries of `path` and creates this process's one (returned in *tmp): a missing
// or read-only directory fails here, before any work.
int create_temporary(const std::string& path, std::string* tmp) {
  remove_stale_temporaries(path);
  *tmp = temporary_path(path);
  const int fd = ::open(tmp->c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw H5Error(path + ": cannot create " + *tmp + ": " + std::strerror(errno) +
                  " (directory missing or not writable?)");
  return fd;
}
}  // namespace

void h5_check_writable(const std::string& path) {
  try {
    path_check_output_file(path, "the output");
  } catch (const std::invalid_argument& e) {
    throw H5Error(e.what());
  }
  std::string tmp;
  ::close(create_temporary(path, &tmp));
  ::unlink(tmp.c_str());
}

H5File H5File::create(const std::string& path) {
  h5_silence();
  std::string tmp;
  const int fd = create_temporary(path, &tmp);
  Handle fapl(memory_fapl(), H5Pclose);
  const hid_t id = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (id < 0) {
    const std::string detail = h5_detail();
    ::close(fd);
    ::unlink(tmp.c_str());
    throw H5Error(path + ": cannot create an HDF5 file in memory" + detail);
  }
  return H5File(path, tmp, id, true, fd);
}

H5File H5File::open(const std::string& path) {
  h5_silence();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw H5Error(path + ": cannot open: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw H5Error(path + ": is a directory, not an HDF5 file");
  if (!S_ISREG(st.st_mode))  // a device or a FIFO: read without end, or never
    throw H5Error(path + ": is " + path_kind(path) + ", not an HDF5 file (expected a regular file)");
  // Before HDF5 parses anything: HDF5 trusts its metadata, and a damaged file can crash it.
  h5_verify_integrity(path);
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 == 0) throw H5Error(path + ": not an HDF5 file (no HDF5 signature)");
  if (is_h5 < 0) {
    const std::string detail = h5_detail();
    throw H5Error(path + ": cannot read" + detail);
  }
  Handle fapl(strong_close_fapl(), H5Pclose);
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
  if (id < 0) {
    const std::string detail = h5_detail();
    const std::string kind = detail.find("truncated") != std::string::npos
                                 ? "truncated HDF5 file"
                                 : "corrupted or unreadable HDF5 file";
    throw H5Error(path + ": " + kind + detail);
  }
  return H5File(path, "", id, false, -1);
}

void H5File::commit() {
  if (!writable_ || id_ < 0) fail("", "commit() on a file not open for writing");
  if (H5Fflush(id_, H5F_SCOPE_GLOBAL) < 0) fail("", "flush failed");
  const ssize_t size = H5Fget_file_image(id_, nullptr, 0);
  if (size < 0) fail("", "cannot take the file image");
  std::vector<char> image(static_cast<size_t>(size));
  if (H5Fget_file_image(id_, image.data(), image.size()) != size) fail("", "cannot take the file image");
  const herr_t rc = H5Fclose(id_);
  id_ = -1;
  if (rc < 0) fail("", "close failed");
  // Our own writes: ENOSPC, EFBIG, EIO come back as one clear error; the destructor removes the
  // temporary file and the previous file at the final name is untouched.
  const auto io_fail = [&](const char* what) {
    throw H5Error(path_ + ": cannot " + what + " " + tmp_path_ + ": " + std::strerror(errno) +
                  " (the previous " + path_ + ", if any, is unchanged)");
  };
  const std::string header = integrity_header(image.data(), image.size());
  if (!write_all(fd_, header.data(), header.size()) || !write_all(fd_, image.data(), image.size()))
    io_fail("write");
  // fsync before rename: after a crash the final name holds either the old or the new file.
  if (::fsync(fd_) != 0 && errno != EINVAL) io_fail("sync");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) io_fail("close");
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    fail("", "cannot rename " + tmp_path_ + " into place: " + std::strerror(errno));
  tmp_path_.clear();
}

// ---- objects -----------------------------------------------------------------------------------

bool H5File::exists(const std::string& name) const {
  const std::string n = strip_slash(name);
  if (n.empty()) return true;  // the root group
  // H5Lexists fails (rather than answering false) when an intermediate group is missing, so walk
  // the path one component at a time.
  size_t pos = 0;
  while (true) {
    const size_t slash = n.find('/', pos);
    const std::string prefix = n.substr(0, slash);
    const htri_t e = H5Lexists(id_, prefix.c_str(), H5P_DEFAULT);
    if (e <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (slash == std::string::npos) return true;
    pos = slash + 1;
  }
}

bool H5File::is_dataset(const std::string& name) const {
  if (!exists(name)) return false;
  Handle obj(H5Oopen(id_, strip_slash(name).c_str(), H5P_DEFAULT), H5Oclose);
  if (!obj.ok()) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  return H5Iget_type(obj.get()) == H5I_DATASET;
}

hid_t H5File::open_object(const std::string& obj, bool create_group) const {
  const std::string n = strip_slash(obj);
  const std::string where = n.empty() ? "/" : n;
  if (!exists(n)) {
    if (!create_group) fail(where, "no such group");
    ensure_groups(n);
  }
  const hid_t o = H5Oopen(id_, n.empty() ? "/" : n.c_str(), H5P_DEFAULT);
  if (o < 0) fail(where, is_dataset(n) ? "is a dataset, not a group" : "cannot open");
  return o;
}

// Creates every missing group along `path` ("a/b/c" creates a, a/b, a/b/c). Objects are created
// without modification times, so the same content gives the same bytes.
void H5File::ensure_groups(const std::string& path) const {
  const std::string n = strip_slash(path);
  size_t pos = 0;
  while (pos <= n.size() && !n.empty()) {
    const size_t slash = n.find('/', pos);
    const std::string prefix = n.substr(0, slash);
    if (!exists(prefix)) {
      Handle gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
      H5Pset_obj_track_times(gcpl.get(), 0);
      Handle g(H5Gcreate2(id_, prefix.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
      if (!g.ok()) fail(prefix, "cannot create group");
    }
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
}

// ---- dataset writes ----------------------------------------------------------------------------

void H5File::create_dataset(const std::string& name, H5Type t, const std::vector<int64_t>& shape) {
  if (!writable_) fail(name, "file is open read-only");
  if (exists(name)) fail(name, "already exists");
  for (int64_t s : shape)
    if (s < 0) fail(name, "negative dimension in shape " + h5_shape_str(shape));
  const std::vector<hsize_t> dims = to_hsize(shape);
  Handle space(shape.empty() ? H5Screate(H5S_SCALAR)
                             : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose);
  if (!space.ok()) fail(name, "cannot create dataspace " + h5_shape_str(shape));
  const std::string n = strip_slash(name);
  const size_t slash = n.rfind('/');
  if (slash != std::string::npos) ensure_groups(n.substr(0, slash));
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_obj_track_times(dcpl.get(), 0);
  if (!shape.empty() && element_count(shape) > 0) {
    // Every dataset with data is chunked and carries HDF5's Fletcher32 checksum per chunk, so a
    // corrupted chunk fails the read (here and in h5py) instead of returning wrong numbers.
    const std::vector<hsize_t> chunk = chunk_dims(shape, t == H5Type::f64 || t == H5Type::i64 ? 8 : 4);
    if (H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) < 0 ||
        H5Pset_fletcher32(dcpl.get()) < 0)
      fail(name, "cannot set chunking and checksum");
  }
  Handle ds(H5Dcreate2(id_, n.c_str(), file_type(t), space.get(), H5P_DEFAULT, dcpl.get(),
                       H5P_DEFAULT),
            H5Dclose);
  if (!ds.ok()) fail(name, "cannot create dataset");
}

void H5File::write_any(const std::string& name, const std::vector<int64_t>& shape, H5Type t,
                       const void* data) {
  create_dataset(name, t, shape);
  if (element_count(shape) == 0) return;
  Handle ds(H5Dopen2(id_, strip_slash(name).c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) fail(name, "cannot open dataset");
  if (H5Dwrite(ds.get(), mem_type(t), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail(name, "write failed");
}

void H5File::write(const std::string& name, const std::vector<int64_t>& shape, const float* d) {
  write_any(name, shape, H5Type::f32, d);
}
void H5File::write(const std::string& name, const std::vector<int64_t>& shape, const double* d) {
  write_any(name, shape, H5Type::f64, d);
}
void H5File::write(const std::string& name, const std::vector<int64_t>& shape, const int32_t* d) {
  write_any(name, shape, H5Type::i32, d);
}
void H5File::write(const std::string& name, const std::vector<int64_t>& shape, const int64_t* d) {
  write_any(name, shape, H5Type::i64, d);
}

void H5File::write_block_any(const std::string& name, const std::vector<int64_t>& start,
                             const std::vector<int64_t>& count, H5Type t, const void* data) {
  if (!writable_) fail(name, "file is open read-only");
  block_io(name, start, count, t, nullptr, data);
}

// One block of a dataset, read into `out` or written from `in`: its dtype and bounds are checked
// against the dataset's before the hyperslab is selected.
void H5File::block_io(const std::string& name, const std::vector<int64_t>& start,
                      const std::vector<int64_t>& count, H5Type t, void* out,
                      const void* in) const {
  const H5Type got = type(name);
  if (got != t)
    fail(name, std::string("has dtype ") + h5_type_name(got) + (in ? ", block is " : ", expected ") +
                   h5_type_name(t));
  const std::vector<int64_t> dims = shape(name);
  if (start.size() != dims.size() || count.size() != dims.size())
    fail(name, "block rank " + std::to_string(start.size()) + " does not match shape " +
                   h5_shape_str(dims));
  for (size_t i = 0; i < dims.size(); ++i)
    if (start[i] < 0 || count[i] < 0 || start[i] + count[i] > dims[i])
      fail(name, "block " + h5_shape_str(start) + " + " + h5_shape_str(count) +
                     " outside shape " + h5_shape_str(dims));
  if (element_count(count) == 0) return;
  Handle ds(H5Dopen2(id_, strip_slash(name).c_str(), H5P_DEFAULT), H5Dclose);
  Handle fspace(H5Dget_space(ds.get()), H5Sclose);
  const std::vector<hsize_t> s = to_hsize(start), c = to_hsize(count);
  if (H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, s.data(), nullptr, c.data(), nullptr) < 0)
    fail(name, "cannot select block");
  Handle mspace(H5Screate_simple(static_cast<int>(c.size()), c.data(), nullptr), H5Sclose);
  if (in) {
    if (H5Dwrite(ds.get(), mem_type(t), mspace.get(), fspace.get(), H5P_DEFAULT, in) < 0)
      fail(name, "block write failed");
  } else if (H5Dread(ds.get(), mem_type(t), mspace.get(), fspace.get(), H5P_DEFAULT, out) < 0) {
    fail(name, "block read failed: corrupted data (Fletcher32 checksum mismatch) or truncated file");
  }
}

void H5File::write_block(const std::string& name, const std::vector<int64_t>& start,
                         const std::vector<int64_t>& count, const float* data) {
  write_block_any(name, start, count, H5Type::f32, data);
}
void H5File::write_block(const std::string& name, const std::vector<int64_t>& start,
                         const std::vector<int64_t>& count, const int32_t* data) {
  write_block_any(name, start, count, H5Type::i32, data);
}

// ---- dataset reads -----------------------------------------------------------------------------

std::vector<int64_t> H5File::shape(const std::string& name) const {
  if (!exists(name)) fail(name, "missing dataset");
  if (!is_dataset(name)) fail(name, "is not a dataset");
  Handle ds(H5Dopen2(id_, strip_slash(name).c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) fail(name, "cannot open dataset");
  Handle space(H5Dget_space(ds.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail(name, "cannot read dataspace");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

H5Type H5File::type(const std::string& name) const {
  if (!exists(name)) fail(name, "missing dataset");
  if (!is_dataset(name)) fail(name, "is not a dataset");
  Handle ds(H5Dopen2(id_, strip_slash(name).c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) fail(name, "cannot open dataset");
  Handle ty(H5Dget_type(ds.get()), H5Tclose);
  H5Type t;
  std::string desc;
  if (!classify(ty.get(), &t, &desc)) fail(name, "has unsupported dtype " + desc);
  return t;
}

void H5File::read_any(const std::string& name, const std::vector<int64_t>& expected, H5Type t,
                      void* out) const {
  const H5Type got = type(name);
  if (got != t)
    fail(name, std::string("has dtype ") + h5_type_name(got) + ", expected " + h5_type_name(t));
  const std::vector<int64_t> dims = shape(name);
  if (dims != expected)
    fail(name, "has shape " + h5_shape_str(dims) + ", expected " + h5_shape_str(expected));
  if (element_count(dims) == 0) return;
  Handle ds(H5Dopen2(id_, strip_slash(name).c_str(), H5P_DEFAULT), H5Dclose);
  if (H5Dread(ds.get(), mem_type(t), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
    fail(name, "read failed: corrupted data (Fletcher32 checksum mismatch) or truncated file");
}

void H5File::read(const std::string& name, const std::vector<int64_t>& e, float* out) const {
  read_any(name, e, H5Type::f32, out);
}
void H5File::read(const std::string& name, const std::vector<int64_t>& e, double* out) const {
  read_any(name, e, H5Type::f64, out);
}
void H5File::read(const std::string& name, const std::vector<int64_t>& e, int32_t* out) const {
  read_any(name, e, H5Type::i32, out);
}
void H5File::read(const std::string& name, const std::vector<int64_t>& e, int64_t* out) const {
  read_any(name, e, H5Type::i64, out);
}

std::vector<float> H5File::read_f32(const std::string& name, std::vector<int64_t>* shape_out) const {
  const std::vector<int64_t> dims = shape(name);
  std::vector<float> v(static_cast<size_t>(element_count(dims)));
  read_any(name, dims, H5Type::f32, v.data());
  if (shape_out) *shape_out = dims;
  return v;
}

std::vector<int32_t> H5File::read_i32(const std::string& name,
                                      std::vector<int64_t>* shape_out) const {
  const std::vector<int64_t> dims = shape(name);
  std::vector<int32_t> v(static_cast<size_t>(element_count(dims)));
  read_any(name, dims, H5Type::i32, v.data());
  if (shape_out) *shape_out = dims;
  return v;
}

void H5File::read_block(const std::string& name, const std::vector<int64_t>& start,
                        const std::vector<int64_t>& count, int32_t* out) const {
  block_io(name, start, count, H5Type::i32, out, nullptr);
}

std::vector<std::string> H5File::children(const std::string& group) const {
  const std::string g = strip_slash(group);
  const std::string where = g.empty() ? "/" : g;
  if (!exists(g)) fail(where, "missing group");
  Handle grp(H5Gopen2(id_, g.empty() ? "/" : g.c_str(), H5P_DEFAULT), H5Gclose);
  if (!grp.ok()) fail(where, "is not a group");
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Literate(grp.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_link, &names) < 0)
    fail(where, "cannot list members");
  return names;
}

std::vector<std::string> H5File::datasets_below(const std::string& group) const {
  const std::string g = strip_slash(group);
  std::vector<std::string> out;
  for (const std::string& child : children(g)) {
    const std::string p = g.empty() ? child : g + "/" + child;
    if (is_dataset(p)) {
      out.push_back(p);
    } else {
      for (std::string& d : datasets_below(p)) out.push_back(std::move(d));
    }
  }
  return out;
}

// ---- attributes --------------------------------------------------------------------------------

namespace {
// Replaces an attribute if present; returns the new attribute (caller closes).
hid_t recreate_attr(hid_t obj, const std::string& key, hid_t type) {
  if (H5Aexists(obj, key.c_str()) > 0) H5Adelete(obj, key.c_str());
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  return H5Acreate2(obj, key.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT);
}
}  // namespace

void H5File::set_attr(const std::string& obj, const std::string& key, const std::string& value) {
  if (!writable_) fail(obj, "file is open read-only");
  Handle o(open_object(obj, true), H5Oclose);
  Handle ty(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(ty.get(), H5T_VARIABLE);
  H5Tset_cset(ty.get(), H5T_CSET_UTF8);
  Handle a(recreate_attr(o.get(), key, ty.get()), H5Aclose);
  const char* p = value.c_str();
  if (!a.ok() || H5Awrite(a.get(), ty.get(), &p) < 0) fail(obj, "cannot write attribute '" + key + "'");
}

void H5File::set_attr(const std::string& obj, const std::string& key, const char* value) {
  set_attr(obj, key, std::string(value));
}

void H5File::set_attr(const std::string& obj, const std::string& key, int64_t value) {
  if (!writable_) fail(obj, "file is open read-only");
  Handle o(open_object(obj, true), H5Oclose);
  Handle a(recreate_attr(o.get(), key, H5T_STD_I64LE), H5Aclose);
  if (!a.ok() || H5Awrite(a.get(), H5T_NATIVE_INT64, &value) < 0)
    fail(obj, "cannot write attribute '" + key + "'");
}

void H5File::set_attr(const std::string& obj, const std::string& key, double value) {
  if (!writable_) fail(obj, "file is open read-only");
  Handle o(open_object(obj, true), H5Oclose);
  Handle a(recreate_attr(o.get(), key, H5T_IEEE_F64LE), H5Aclose);
  if (!a.ok() || H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value) < 0)
    fail(obj, "cannot write attribute '" + key + "'");
}

bool H5File::has_attr(const std::string& obj, const std::string& key) const {
  if (!exists(obj)) return false;
  Handle o(open_object(obj, false), H5Oclose);
  const htri_t e = H5Aexists(o.get(), key.c_str());
  H5Eclear2(H5E_DEFAULT);
  return e > 0;
}

std::vector<std::string> H5File::attr_names(const std::string& obj) const {
  Handle o(open_object(obj, false), H5Oclose);
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Aiterate2(o.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &names) < 0)
    fail(obj, "cannot list attributes");
  return names;
}

namespace {
// Opens a scalar attribute (one element) or explains why not.
struct AttrOpen {
  hid_t attr = -1;
  std::string error;
};
AttrOpen open_scalar_attr(hid_t obj, const std::string& key) {
  AttrOpen r;
  if (H5Aexists(obj, key.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    r.error = "missing attribute '" + key + "'";
    return r;
  }
  r.attr = H5Aopen(obj, key.c_str(), H5P_DEFAULT);
  if (r.attr < 0) {
    r.error = "cannot open attribute '" + key + "'";
    return r;
  }
  Handle space(H5Aget_space(r.attr), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n != 1) {
    H5Aclose(r.attr);
    r.attr = -1;
    r.error = "attribute '" + key + "' holds " + std::to_string(n) + " values, expected one";
  }
  return r;
}
}  // namespace

// The scalar attribute `key` of `obj`: opened, its type class checked against `classes` (the
// message says `expected`), then handed to `read`, which returns false when H5Aread fails.
void H5File::read_scalar_attr(const std::string& obj, const std::string& key,
                              std::initializer_list<H5T_class_t> classes, const char* expected,
                              const std::function<bool(hid_t attr, hid_t type)>& read) const {
  const std::string where = strip_slash(obj).empty() ? "/" : strip_slash(obj);
  Handle o(open_object(obj, false), H5Oclose);
  AttrOpen ao = open_scalar_attr(o.get(), key);
  if (ao.attr < 0) fail(where, ao.error);
  Handle a(ao.attr, H5Aclose);
  Handle ty(H5Aget_type(a.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(ty.get());
  if (std::find(classes.begin(), classes.end(), cls) == classes.end()) {
    H5Type t;
    std::string desc;
    classify(ty.get(), &t, &desc);
    fail(where, "attribute '" + key + "' is " + desc + ", expected " + expected);
  }
  if (!read(a.get(), ty.get())) fail(where, "cannot read attribute '" + key + "'");
}

std::string H5File::attr_string(const std::string& obj, const std::string& key) const {
  std::string out;
  read_scalar_attr(obj, key, {H5T_STRING}, "a string", [&](hid_t a, hid_t ty) {
    // Read with the stored type itself as memory type: no charset conversion is attempted.
    Handle mt(H5Tcopy(ty), H5Tclose);
    if (H5Tis_variable_str(ty) > 0) {
      char* s = nullptr;
      if (H5Aread(a, mt.get(), &s) < 0) return false;
      out = s ? s : "";
      if (s) H5free_memory(s);
      return true;
    }
    out.assign(H5Tget_size(ty), '\0');
    if (H5Aread(a, mt.get(), out.data()) < 0) return false;
    const size_t nul = out.find('\0');
    if (nul != std::string::npos) out.resize(nul);
    while (!out.empty() && out.back() == ' ') out.pop_back();  // space-padded strings
    return true;
  });
  return out;
}

int64_t H5File::attr_int(const std::string& obj, const std::string& key) const {
  int64_t v = 0;
  read_scalar_attr(obj, key, {H5T_INTEGER}, "an integer",
                   [&](hid_t a, hid_t) { return H5Aread(a, H5T_NATIVE_INT64, &v) >= 0; });
  return v;
}

double H5File::attr_double(const std::string& obj, const std::string& key) const {
  double v = 0;
  read_scalar_attr(obj, key, {H5T_FLOAT, H5T_INTEGER}, "a number",
                   [&](hid_t a, hid_t) { return H5Aread(a, H5T_NATIVE_DOUBLE, &v) >= 0; });
  return v;
}

}  // namespace moerl
