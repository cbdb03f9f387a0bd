// h5io_attributes.cpp — attributes on "/" or a group (see h5io.h): written as scalars (strings
// as variable-length UTF-8), read with their type class checked.
#include "store/h5io.h"

#include <algorithm>

#include "store/h5io_internal.h"

namespace moerl {

using namespace h5io_internal;

namespace {
herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

// Replaces an attribute if present; returns the new attribute (caller closes).
hid_t recreate_attr(hid_t obj, const std::string& key, hid_t type) {
  if (H5Aexists(obj, key.c_str()) > 0) H5Adelete(obj, key.c_str());
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  return H5Acreate2(obj, key.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT);
}
}  // namespace

// One scalar attribute, replacing any of that name: stored as `stored`, value read as `memory`.
void H5File::write_scalar_attr(const std::string& obj, const std::string& key, hid_t stored, hid_t memory,
                               const void* value) {
  if (!writable_) fail(obj, "file is open read-only");
  Handle o(open_object(obj, true), H5Oclose);
  Handle a(recreate_attr(o.get(), key, stored), H5Aclose);
  if (!a.ok() || H5Awrite(a.get(), memory, value) < 0) fail(obj, "cannot write attribute '" + key + "'");
}

void H5File::set_attr(const std::string& obj, const std::string& key, const std::string& value) {
  Handle ty(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(ty.get(), H5T_VARIABLE);
  H5Tset_cset(ty.get(), H5T_CSET_UTF8);
  const char* p = value.c_str();
  write_scalar_attr(obj, key, ty.get(), ty.get(), &p);
}

void H5File::set_attr(const std::string& obj, const std::string& key, const char* value) {
  set_attr(obj, key, std::string(value));
}

void H5File::set_attr(const std::string& obj, const std::string& key, int64_t value) {
  write_scalar_attr(obj, key, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void H5File::set_attr(const std::string& obj, const std::string& key, double value) {
  write_scalar_attr(obj, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
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
