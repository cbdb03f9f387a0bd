// task.cpp — the shared parts of tasks and the task table (task.h).
#include "sim/tasks/task.h"

#include <algorithm>
#include <stdexcept>

namespace moerl {

// Factories, one file each (sim/tasks/<name>.cpp), declared beside their rows.
std::unique_ptr<Task> make_bubble_task(const TaskConfig& cfg);
std::unique_ptr<Task> make_modadd_task(const TaskConfig& cfg);
std::unique_ptr<Task> make_reverse_task(const TaskConfig& cfg);
std::unique_ptr<Task> make_sort_task(const TaskConfig& cfg);

const std::vector<TaskInfo>& task_registry() {
  // in alphabetical order: the order of every list derived from the table
  static const std::vector<TaskInfo> table = {
      {"bubble", "sort task.length values in [0, task.base) by writing every bubble-sort pass until the list is sorted, then EOS (answers of 1..n passes of n+1 tokens)", make_bubble_task},
      {"modadd", "add two task.length-digit numbers in base task.base, modulo base^length", make_modadd_task},
      {"reverse", "reverse task.length values in [0, task.base)", make_reverse_task},
      {"sort", "sort task.length values in [0, task.base) ascending", make_sort_task},
  };
  return table;
}

const TaskInfo* task_find(const std::string& name) {
  for (const TaskInfo& t : task_registry())
    if (name == t.name) return &t;
  return nullptr;
}

std::string task_names() {
  std::string list;
  for (const TaskInfo& t : task_registry()) list += (list.empty() ? "" : ", ") + std::string(t.name);
  return list;
}

std::string task_key_doc() {
  std::string doc = "verifiable task:";
  for (const TaskInfo& t : task_registry()) doc += std::string(" ") + t.name + " (" + t.doc + ");";
  doc.pop_back();
  return doc;
}

void TaskConfig::validate() const {
  if (!task_find(name))
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

bool Task::well_formed(const int32_t* response, int n) const {
  if (!ends_at_eos()) return true;
  if (n < 1 || response[n - 1] != eos()) return false;
  for (int i = 0; i + 1 < n; ++i)
    if (response[i] == eos()) return false;
  return true;
}

float Task::reward(const int32_t* answer, int answer_len, const int32_t* response, int response_len,
                   bool partial, RewardOn on) const {
  if (on == RewardOn::final_answer && has_working()) {
    const int F = final_answer_len(answer_len);
    if (!well_formed(response, response_len) || response_len < F) return 0.0f;
    int equal = 0;
    for (int i = 1; i <= F; ++i) equal += answer[answer_len - i] == response[response_len - i];
    if (partial) return static_cast<float>(equal) / F;
    return equal == F ? 1.0f : 0.0f;
  }
  if (!ends_at_eos()) {  // fixed length: answer_len == response_len == R
    const int R = answer_len;
    int equal = 0;
    for (int i = 0; i < R; ++i) equal += answer[i] == response[i];
    if (partial) return static_cast<float>(equal) / R;
    return equal == R ? 1.0f : 0.0f;
  }
  if (!well_formed(response, response_len)) return 0.0f;
  const int common = std::min(answer_len, response_len), longer = std::max(answer_len, response_len);
  int equal = 0;
  for (int i = 0; i < common; ++i) equal += answer[i] == response[i];
  if (partial) return static_cast<float>(equal) / longer;
  return equal == longer ? 1.0f : 0.0f;
}

AnswerGrade Task::grade(const int32_t* answer, int answer_len, const int32_t* response,
                         int response_len) const {
  AnswerGrade g;
  g.stop = (response_len > answer_len) - (response_len < answer_len);
  if (!well_formed(response, response_len)) return g;
  g.well_formed = true;
  g.partial = reward(answer, answer_len, response, response_len, true);
  g.exact = reward(answer, answer_len, response, response_len, false) == 1.0f;
  // the positions both wrote, less the one where either ends (EOS against a separator when the
  // two stop at different places)
  const int common = std::min(answer_len, response_len) - (ends_at_eos() ? 1 : 0);
  g.working_correct = std::equal(answer, answer + common, response);
  const int F = final_answer_len(answer_len);
  g.final_correct = has_working() ? response_len >= F && std::equal(answer + answer_len - F, answer + answer_len,
                                                                    response + response_len - F)
                                  : g.exact;
  return g;
}

std::unique_ptr<Task> task_create(const TaskConfig& cfg) {
  cfg.validate();
  return task_find(cfg.name)->create(cfg);
}

}  // namespace moerl
