// path_checks.cpp — see path_checks.h.
#include "store/path_checks.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "store/h5io.h"

namespace moerl {

namespace {
const char* kind_name(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}
}  // namespace

std::string path_kind(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT ? "missing" : std::strerror(errno);
  return kind_name(st.st_mode);
}

void path_check_input_file(const std::string& path, const std::string& what) {
  if (path.empty()) throw std::invalid_argument(what + ": the path is empty");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err != ENOENT) throw std::invalid_argument(path + ": cannot read " + what + ": " + std::strerror(err));
    std::error_code ec;
    const bool relative = std::filesystem::path(path).is_relative();
    throw std::invalid_argument(path + ": no such file: cannot read " + what + " (" + std::strerror(err) +
                                (relative ? ", relative to " + std::filesystem::current_path(ec).string() : "") + ")");
  }
  if (!S_ISREG(st.st_mode))
    throw std::invalid_argument(path + ": is " + kind_name(st.st_mode) + ", not a " + what +
                                " (expected a regular file)");
}

void path_check_output_file(const std::string& path, const std::string& what) {
  if (path.empty()) throw std::invalid_argument(what + ": the path is empty");
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // A write renames a new file into place: it would replace the link and leave its target as it
    // was (a resumed run's real file still "running"). Refused, naming the target to give instead.
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::read_symlink(path, ec);
    throw std::invalid_argument(path + ": is a symbolic link" + (ec ? "" : " to " + target.string()) + "; " + what +
                                " is written by renaming a new file into place, which would replace the link and "
                                "leave its target unchanged: give the target's path");
  }
  if (::stat(path.c_str(), &st) != 0) return;  // absent (or unreachable: the write says why)
  if (S_ISDIR(st.st_mode))
    throw std::invalid_argument(path + ": is a directory; " + what + " names a file to write (e.g. " +
                                (std::filesystem::path(path) / "run.h5").string() + ")");
  if (!S_ISREG(st.st_mode))
    throw std::invalid_argument(path + ": is " + kind_name(st.st_mode) + "; " + what +
                                " must be a regular file or a new name (files are written beside it and renamed into place)");
}

void path_check_output_dir(const std::string& path, const std::string& what) {
  if (path.empty()) throw std::invalid_argument(what + ": the path is empty");
  for (std::filesystem::path p(path); !p.empty(); p = p.parent_path()) {
    struct stat st;
    if (::stat(p.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) return;
      throw std::invalid_argument(what + " " + path + ": " + (p.string() == path ? "" : p.string() + " ") + "is " +
                                  kind_name(st.st_mode) + ", not a directory (" + what +
                                  " names a directory, made when missing)");
    }
    if (p == p.parent_path()) break;
  }
}

bool path_same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ec;
  const auto ca = std::filesystem::weakly_canonical(a, ec);
  if (ec) return false;
  const auto cb = std::filesystem::weakly_canonical(b, ec);
  return !ec && ca == cb;
}

void path_check_not_an_input(const std::string& out, const std::string& out_what,
                             const std::vector<std::pair<std::string, std::string>>& inputs) {
  for (const auto& [what, in] : inputs)
    if (!in.empty() && path_same_file(out, in))
      throw std::invalid_argument(out + ": " + out_what + " is the " + what + " " + in +
                                  " this command reads; writing it would replace its input (choose another " +
                                  out_what + ")");
}

std::string path_describe(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  if (!S_ISREG(st.st_mode)) return kind_name(st.st_mode);
  const std::string bytes = std::to_string(static_cast<long long>(st.st_size)) + " bytes";
  try {
    const H5File f = H5File::open(path);
    if (f.has_attr("/", "format")) {
      const std::string format = f.attr_string("/", "format");
      if (format == "moerl-checkpoint") return "a moerl checkpoint (" + bytes + ")";
      return "a " + format + " file (" + bytes + ")";
    }
    if (f.has_attr("/", "scenario") && f.has_attr("/", "status")) {
      std::string d = "the results of a run (status " + f.attr_string("/", "status");
      if (f.exists("metrics/reward_mean")) d += ", " + std::to_string(f.shape("metrics/reward_mean").at(0)) + " steps";
      return d + ")";
    }
    return "an HDF5 file (" + bytes + ")";
  } catch (const std::exception&) {
  }
  const auto ext = std::filesystem::path(path).extension().string();
  if (ext == ".json") return "a JSON file of " + bytes;
  return "a file of " + bytes;
}

void path_check_no_overwrite(const std::string& out, const std::string& what, bool force) {
  if (force || out.empty()) return;
  const std::string held = path_describe(out);
  if (held.empty()) return;
  throw std::invalid_argument(out + ": exists and holds " + held + "; nothing is overwritten without --force "
                              "(--force overwrites it, or choose another " + what + ")");
}

}  // namespace moerl
