// h5io.h — small RAII helpers over the HDF5 C API, shared by checkpoints (store/checkpoint.cpp)
// and by the runtime's result files (sim/). One header over five files, one per concern: files,
// objects and datasets (h5io.cpp), attributes (h5io_attributes.cpp), the temporary file and the
// atomic write (h5io_atomic.cpp: create, commit), the integrity header (h5io_integrity.cpp) and
// its CRC-32 (h5io_crc32.cpp); what they share is store/h5io_internal.h.
//
// What it guarantees:
//  * a file being written lives at "<path>.tmp-<pid>" and appears at <path> only through commit()
//    (close, fsync, rename): readers never see a half-written file at the final name, and a writer
//    destroyed without commit (exception, early return) removes its temporary file;
//  * every failure throws H5Error whose what() reads "<file>: <object>: <what is wrong>", with
//    HDF5's own diagnosis appended; HDF5's automatic printing of its error stack is switched off;
//  * reads check dtype and shape against what the caller expects;
//  * integrity: a written file starts with a 512-byte header (an HDF5 user block, which HDF5 and
//    h5py skip) holding its size and the CRC-32 of everything after it; open() checks both before
//    HDF5 parses a byte, so a flipped bit or a cut anywhere is refused with the file named — never
//    handed to HDF5, which trusts its metadata and can crash on damaged files. Every dataset with
//    data is also chunked with HDF5's Fletcher32 checksum, so readers that skip the header (h5py)
//    still fail the read of a damaged chunk, naming the dataset. Files without the header (written
//    by other tools) open unchecked;
//  * writers build the file in memory (it must fit there; the largest moerl writes, a score output,
//    is tens of MB) and commit() writes it with POSIX calls, so a full disk
//    (ENOSPC), a size limit (EFBIG) or EIO is one H5Error naming the file and errno; the previous
//    file at the final name stays intact and the temporary file is removed. Temporaries left by
//    killed processes ("<path>.tmp-<pid>" whose pid is gone) are removed by the next create().
// Datasets are row-major with shape vector<int64_t> (empty = scalar); names are paths ("a/b/c"),
// and writing creates intermediate groups. Attributes hang on "/" or any group path (created on
// write if missing). Strings are stored as variable-length UTF-8 (h5py reads them as str).
// Objects are written without modification times: the same content gives the same bytes.
// Not thread-safe: one thread per file (the HDF5 build is not thread-safe either).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include <hdf5.h>

namespace moerl {

class H5Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Element types a dataset may hold.
enum class H5Type : uint8_t { f32 = 0, f64, i32, i64 };
const char* h5_type_name(H5Type t);  // "float32", "float64", "int32", "int64"

// "[2, 3]" — for messages.
std::string h5_shape_str(const std::vector<int64_t>& shape);

// Checks, before any work, that create(path) would succeed (creates and removes the temporary
// file); throws H5Error naming the path and errno.
void h5_check_writable(const std::string& path);
// Removes "<path>.tmp-<pid>" files whose process no longer exists; returns how many.
int remove_stale_temporaries(const std::string& path);
// "<path>.tmp-<pid>": where this process writes `path` before renaming it into place.
std::string temporary_path(const std::string& path);

// Checks a file's integrity header (see above); throws H5Error naming the file and what is
// wrong. Files without a header pass.
void h5_verify_integrity(const std::string& path);
// Renews the integrity header of a file edited in place by another HDF5 writer (tests that make
// well-formed but unacceptable files; tools that patch attributes).
void h5_seal_file(const std::string& path);
// The header for a file image of n bytes (what commit() writes before the image).
std::string integrity_header(const char* image, size_t n);

class H5File {
 public:
  // Creates "<path>.tmp-<pid>" for writing (truncating any stale one; a missing or read-only
  // directory fails here, before any work); commit() publishes it.
  static H5File create(const std::string& path);
  // Opens an existing file read-only after checking its integrity header; errors distinguish
  // missing, not HDF5, corrupted and truncated files.
  static H5File open(const std::string& path);

  H5File(H5File&& o) noexcept;
  H5File& operator=(H5File&& o) noexcept;
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;
  // Closes; a writer that was not committed deletes its temporary file.
  ~H5File();

  // Closes the file, fsyncs it and renames it to the final path. Only for files from create().
  void commit();

  const std::string& path() const { return path_; }  // the final path (also in messages)
  bool writable() const { return writable_; }

  // ---- datasets ------------------------------------------------------------------------------
  // Whole-dataset writes; the dataset must not exist yet.
  void write(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  void write(const std::string& name, const std::vector<int64_t>& shape, const double* data);
  void write(const std::string& name, const std::vector<int64_t>& shape, const int32_t* data);
  void write(const std::string& name, const std::vector<int64_t>& shape, const int64_t* data);

  // Block writes, for outputs produced batch by batch: create the dataset once, then write
  // hyperslabs [start, start+count) with data laid out row-major over `count`.
  void create_dataset(const std::string& name, H5Type type, const std::vector<int64_t>& shape);
  void write_block(const std::string& name, const std::vector<int64_t>& start,
                   const std::vector<int64_t>& count, const float* data);
  void write_block(const std::string& name, const std::vector<int64_t>& start,
                   const std::vector<int64_t>& count, const int32_t* data);

  bool exists(const std::string& name) const;      // any object (group or dataset) at this path
  bool is_dataset(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const;  // throws if not a dataset
  H5Type type(const std::string& name) const;                 // throws if not one of H5Type

  // Reads a whole dataset whose dtype must be exactly T's and whose shape must equal `expected`.
  void read(const std::string& name, const std::vector<int64_t>& expected, float* out) const;
  void read(const std::string& name, const std::vector<int64_t>& expected, double* out) const;
  void read(const std::string& name, const std::vector<int64_t>& expected, int32_t* out) const;
  void read(const std::string& name, const std::vector<int64_t>& expected, int64_t* out) const;
  // Reads a whole dataset of any shape (returned in *shape when non-null); dtype must match T.
  std::vector<float> read_f32(const std::string& name, std::vector<int64_t>* shape = nullptr) const;
  std::vector<int32_t> read_i32(const std::string& name, std::vector<int64_t>* shape = nullptr) const;
  // Reads the hyperslab [start, start+count) of an int32 dataset.
  void read_block(const std::string& name, const std::vector<int64_t>& start,
                  const std::vector<int64_t>& count, int32_t* out) const;

  // Names (not paths) of the direct children of a group, sorted.
  std::vector<std::string> children(const std::string& group) const;
  // Full paths (no leading '/') of every dataset below a group, sorted.
  std::vector<std::string> datasets_below(const std::string& group) const;

  // ---- attributes on "/" or a group ------------------------------------------------------------
  void set_attr(const std::string& obj, const std::string& key, const std::string& value);
  void set_attr(const std::string& obj, const std::string& key, const char* value);
  void set_attr(const std::string& obj, const std::string& key, int64_t value);
  void set_attr(const std::string& obj, const std::string& key, double value);
  bool has_attr(const std::string& obj, const std::string& key) const;
  std::vector<std::string> attr_names(const std::string& obj) const;  // sorted
  // Typed reads: a string attribute; an integer attribute; a floating (or integer) attribute.
  std::string attr_string(const std::string& obj, const std::string& key) const;
  int64_t attr_int(const std::string& obj, const std::string& key) const;
  double attr_double(const std::string& obj, const std::string& key) const;

 private:
  H5File(std::string path, std::string tmp_path, hid_t id, bool writable, int fd);
  void close_quietly();
  [[noreturn]] void fail(const std::string& object, const std::string& what) const;
  void write_scalar_attr(const std::string& obj, const std::string& key, hid_t stored, hid_t memory,
                         const void* value);
  void write_any(const std::string& name, const std::vector<int64_t>& shape, H5Type t,
                 const void* data);
  void read_scalar_attr(const std::string& obj, const std::string& key,
                        std::initializer_list<H5T_class_t> classes, const char* expected,
                        const std::function<bool(hid_t attr, hid_t type)>& read) const;
  void block_io(const std::string& name, const std::vector<int64_t>& start,
                const std::vector<int64_t>& count, H5Type t, void* out, const void* in) const;
  void write_block_any(const std::string& name, const std::vector<int64_t>& start,
                       const std::vector<int64_t>& count, H5Type t, const void* data);
  void read_any(const std::string& name, const std::vector<int64_t>& expected, H5Type t,
                void* out) const;
  hid_t open_object(const std::string& obj, bool create_group) const;
  void ensure_groups(const std::string& path) const;

  std::string path_;      // final path
  std::string tmp_path_;  // where a writer actually writes
  hid_t id_ = -1;
  bool writable_ = false;
  int fd_ = -1;           // a writer's temporary file, written by commit()
};

}  // namespace moerl
