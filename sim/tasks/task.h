// task.h — synthetic verifiable tasks: a tokenizer, a seeded prompt generator, exact-match reward
// with optional partial credit, and a held-out evaluation set.
//
// Every task has fixed lengths: a prompt of P tokens (ending in the separator) and an answer of R
// tokens; generation runs exactly R tokens and the reward compares them with the answer. Token
// ids are small integers below vocab_size(); the model's vocabulary may be larger (unused ids are
// then never the answer, so a well-trained policy learns to avoid them).
// Train prompt i is drawn from stream (seed, Stream::data, split 0, i); eval prompt i from split 1,
// so the held-out set never depends on how many training prompts were drawn.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moerl {

struct TaskConfig {
  std::string name = "sort";  // a name of the task table (task_registry)
  int length = 8;             // sort/reverse: values per prompt; modadd: digits per operand
  int base = 10;              // value range [0, base) (sort/reverse) or digit base (modadd)
  bool partial_credit = false;  // reward = share of correct answer positions instead of 0/1
  void validate() const;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual const char* name() const = 0;
  virtual int vocab_size() const = 0;  // ids used, separator included
  virtual int prompt_len() const = 0;  // P
  virtual int answer_len() const = 0;  // R
  // Writes prompt [P] and answer [R] of example `index` of a split (0 = train, 1 = eval).
  virtual void example(int32_t* prompt, int32_t* answer, uint64_t seed, int split,
                       uint64_t index) const = 0;
  // Human-readable rendering of a token sequence, for docs and debugging.
  virtual std::string render(const int32_t* tokens, int n) const;

  // 1 if response == answer else 0; with partial credit the share of equal positions.
  float reward(const int32_t* answer, const int32_t* response, bool partial) const;
};

// One row per task (scenario key task.name); adding a task: sim/tasks/<name>.cpp with its factory,
// and its row in task.cpp.
struct TaskInfo {
  const char* name;
  const char* doc;
  std::unique_ptr<Task> (*create)(const TaskConfig&);
};
const std::vector<TaskInfo>& task_registry();  // alphabetical
const TaskInfo* task_find(const std::string& name);  // nullptr when unknown

std::unique_ptr<Task> task_create(const TaskConfig& cfg);
std::string task_names();    // "modadd, reverse, sort"
std::string task_key_doc();  // doc of the task.name key

}  // namespace moerl
