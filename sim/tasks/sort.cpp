// sort.cpp — sort n values ascending: "3 1 2 |" → "1 2 3".
#include "sim/tasks/sequence_task.h"

namespace moerl {
namespace {
struct SortValues {
  void operator()(int32_t* b, int32_t* e) const { std::sort(b, e); }
};
}  // namespace
std::unique_ptr<Task> make_sort_task(const TaskConfig& cfg) {
  return std::make_unique<SequenceTask<SortValues>>(cfg, "sort");
}
}  // namespace moerl
