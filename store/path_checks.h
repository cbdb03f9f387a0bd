// path_checks.h — what kind of thing a path names, checked before a command reads or writes it.
// An input file must be a regular file (a directory read as a scenario gives the defaults; a
// character device such as /dev/zero reads without end). An output file must be a file name:
// absent, or a regular file (moerl writes "<path>.tmp-<pid>" and renames it into place, which a
// directory or a device cannot take). An output must not be one of the command's inputs.
// Every check throws std::invalid_argument whose message names the path, what it is, and what is
// expected.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace moerl {

// "a directory", "a character device", "a FIFO", ... for a path that exists (lstat's type after
// following links); "missing" when it does not exist.
std::string path_kind(const std::string& path);

// `what` ("scenario file", "checkpoint") must exist and be a regular file.
void path_check_input_file(const std::string& path, const std::string& what);
// `what` ("results file", "--out") must be absent or a regular file, not a symbolic link (the
// rename that writes it would replace the link, not its target); its directory is not checked
// (h5_check_writable does that by creating the temporary).
void path_check_output_file(const std::string& path, const std::string& what);
// `what` ("--cache") must be a directory or a path where one can be made: the path and each of its
// ancestors that exists must be a directory (a file there would make every write below it fail).
void path_check_output_dir(const std::string& path, const std::string& what);
// True when a and b name the same file: the same inode when both exist, else the same absolute
// normalised path.
bool path_same_file(const std::string& a, const std::string& b);
// Refuses an output that would replace an input: {what, path} of each input, named in the message.
void path_check_not_an_input(const std::string& out, const std::string& out_what,
                             const std::vector<std::pair<std::string, std::string>>& inputs);

// What an existing file holds, in words, for a refusal to overwrite it: "the results of a run
// (status complete, 120 steps)", "a moerl checkpoint", "a moerl score output", "a JSON file of 812
// bytes", "a file of 3 bytes"; "" when the path does not exist.
std::string path_describe(const std::string& path);
// A command that writes `out` (its option `what`, "--out") without --force refuses an existing
// file, naming it and what it holds (moerl run's promise, kept by every command that writes).
void path_check_no_overwrite(const std::string& out, const std::string& what, bool force);

}  // namespace moerl
