// task.cpp — the shared parts of tasks and the registry.
#include "sim/tasks/task.h"

#include <stdexcept>

#include "sim/tasks/tasks.h"

namespace moerl {

void TaskConfig::validate() const {
  if (name != "sort" && name != "reverse" && name != "modadd")
    throw std::invalid_argument("task.name = " + name + ": must be one of " + task_names());
  if (length < 1 || length > 64)
    throw std::invalid_argument("task.length = " + std::to_string(length) + ": must be in [1, 64]");
  if (base < 2 || base > 256)
    throw std::invalid_argument("task.base = " + std::to_string(base) + ": must be in [2, 256]");
}

std::string Task::render(const int32_t* tokens, int n) const {
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += std::to_string(tokens[i]);
  }
  return s;
}

float Task::reward(const int32_t* answer, const int32_t* response, bool partial) const {
  const int R = answer_len();
  int equal = 0;
  for (int i = 0; i < R; ++i) equal += answer[i] == response[i];
  if (partial) return static_cast<float>(equal) / R;
  return equal == R ? 1.0f : 0.0f;
}

std::string task_names() { return "modadd, reverse, sort"; }

std::unique_ptr<Task> task_create(const TaskConfig& cfg) {
  cfg.validate();
  if (cfg.name == "sort") return make_sort_task(cfg);
  if (cfg.name == "reverse") return make_reverse_task(cfg);
  return make_modadd_task(cfg);
}

}  // namespace moerl
