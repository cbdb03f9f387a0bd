// text_io.h — small text files written atomically (index files, JSON reports).
#pragma once

#include <string>

namespace moerl {

// Writes text to "<path>.tmp-<pid>", then renames it to path: readers see the old file or the
// whole new one, never a partial write. Throws std::runtime_error naming the path on failure.
void text_write_atomic(const std::string& path, const std::string& text);

}  // namespace moerl
