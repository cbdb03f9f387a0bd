// text_io.h — small text files: written atomically (index files, JSON reports), read with the
// checks every input gets (a regular file of bounded size), and user text made visible in messages.
#pragma once

#include <cstddef>
#include <string>

namespace moerl {

// Writes text to "<path>.tmp-<pid>", then renames it to path: readers see the old file or the
// whole new one, never a partial write. Throws std::runtime_error naming the path on failure.
void text_write_atomic(const std::string& path, const std::string& text);

// The largest scenario or grid file moerl reads: the biggest in the tree is a few KiB, so 1 MiB
// refuses only what is not a scenario (a log, a binary, /dev/zero) before reading it whole.
inline constexpr size_t kScenarioMaxBytes = size_t{1} << 20;

// Reads a whole text input ("scenario file", "grid file": `what`, for messages). Refuses, naming
// the path, what is not a regular file (a directory, a character device such as /dev/zero, a
// FIFO), a file over max_bytes (reading stops there: a file that grows is not read without
// bound), and a file that cannot be read. Throws std::invalid_argument.
std::string text_read_input(const std::string& path, const std::string& what, size_t max_bytes);

// The text with every character a terminal would not show replaced by a visible escape:
// control bytes as \xNN (\t, \r, \n as themselves escaped), bytes that are not UTF-8 as \xNN,
// and invisible code points (byte-order mark, zero-width and bidirectional marks, no-break and
// other odd spaces, soft hyphen) as <U+XXXX>. Printable text, UTF-8 included, is unchanged, and
// the result of text_visible is its own text_visible (idempotent).
std::string text_visible(const std::string& s);
// A value as an error message quotes it: text_visible, and cut after `max` bytes (at a character
// boundary) with its length said, so a 100 kB value is not echoed whole.
std::string text_shown(const std::string& s, size_t max = 60);

// A leading UTF-8 byte-order mark removed (editors on Windows write one; it is not part of the text).
std::string text_strip_bom(const std::string& s);

}  // namespace moerl
