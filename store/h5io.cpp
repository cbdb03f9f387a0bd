// h5io.cpp — the HDF5 wrapper (see h5io.h): life cycle, open, objects, datasets; HDF5's errors
// reported in ours. Attributes: h5io_attributes.cpp; create() and commit(), the atomic write:
// h5io_atomic.cpp; the integrity header: h5io_integrity.cpp (h5io_internal.h lists them).
#include "store/h5io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "store/h5io_internal.h"
#include "store/path_checks.h"

namespace moerl {

using namespace h5io_internal;

namespace h5io_internal {

void h5_silence() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

namespace {
herr_t collect_error(unsigned, const H5E_error2_t* err, void* data) {
  auto* v = static_cast<std::vector<std::string>*>(data);
  if (err->desc && *err->desc) v->push_back(err->desc);
  return 0;
}
}  // namespace

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

hid_t strong_close_fapl() {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
  return fapl;
}

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

std::string strip_slash(const std::string& name) {
  size_t i = 0;
  while (i < name.size() && name[i] == '/') ++i;
  return name.substr(i);
}

}  // namespace h5io_internal

namespace {

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

herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* data) {
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

// A moved-from file owns nothing: no HDF5 id, no descriptor, no temporary to remove.
H5File::H5File(H5File&& o) noexcept
    : path_(std::move(o.path_)), tmp_path_(std::exchange(o.tmp_path_, std::string())),
      id_(std::exchange(o.id_, -1)), writable_(o.writable_), fd_(std::exchange(o.fd_, -1)) {}

H5File& H5File::operator=(H5File&& o) noexcept {
  if (this != &o) {
    close_quietly();
    path_ = std::move(o.path_);
    tmp_path_ = std::exchange(o.tmp_path_, std::string());
    id_ = std::exchange(o.id_, -1);
    writable_ = o.writable_;
    fd_ = std::exchange(o.fd_, -1);
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

}  // namespace moerl
