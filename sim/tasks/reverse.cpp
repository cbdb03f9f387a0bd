// reverse.cpp — reverse n values: "3 1 2 |" → "2 1 3".
#include "sim/tasks/sequence_task.h"

namespace moerl {
namespace {
struct ReverseValues {
  void operator()(int32_t* b, int32_t* e) const { std::reverse(b, e); }
};
}  // namespace
std::unique_ptr<Task> make_reverse_task(const TaskConfig& cfg) {
  return std::make_unique<SequenceTask<ReverseValues>>(cfg, "reverse");
}
}  // namespace moerl
