// h5io_internal.h — what the files of the HDF5 wrapper share (store/h5io*.cpp, see store/h5io.h);
// included by them only.
//   h5io.cpp             the wrapper: files, objects, datasets (typed, shape-checked, chunked with
//                        Fletcher32), HDF5's errors in ours
//   h5io_attributes.cpp  attributes
//   h5io_atomic.cpp      the temporary file and the atomic write: create() builds the file in
//                        memory, commit() writes it beside the final name, fsyncs and renames it
//   h5io_integrity.cpp   the integrity header every written file starts with, checked by open()
//   h5io_crc32.cpp       the CRC-32 the header holds
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <hdf5.h>

#include "store/h5io.h"

namespace moerl::h5io_internal {

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
void h5_silence();
// HDF5's own diagnosis of the last failed call (deepest entries first), then clears the stack.
// Must be called before any other HDF5 API call, which would reset the stack.
std::string h5_detail();
// File access: closing the file closes every object still open in it ("strong"), so commit()
// really releases the file before renaming it.
hid_t strong_close_fapl();
// Classifies a stored type; false when it is none of H5Type. *desc gets a readable name either way.
bool classify(hid_t type, H5Type* out, std::string* desc);
// A dataset or group name without its leading slashes.
std::string strip_slash(const std::string& name);

// CRC-32 as zlib computes it (polynomial 0xEDB88320), so Python checks it with zlib.crc32.
uint32_t crc32_update(uint32_t crc, const char* data, size_t n);

}  // namespace moerl::h5io_internal
