// tasks.h — factories of the concrete tasks (one file each).
#pragma once

#include <memory>

#include "sim/tasks/task.h"

namespace moerl {
std::unique_ptr<Task> make_sort_task(const TaskConfig& cfg);
std::unique_ptr<Task> make_reverse_task(const TaskConfig& cfg);
std::unique_ptr<Task> make_modadd_task(const TaskConfig& cfg);
}  // namespace moerl
