// task.h — synthetic verifiable tasks: a tokenizer, a seeded prompt generator, exact-match reward
// with optional partial credit, and a held-out evaluation set.
//
// A prompt has P tokens (ending in a separator). An answer has its own length, at most
// max_answer_len() tokens:
//  * fixed-length tasks (eos() < 0: sort, reverse, modadd with task.eos = false): every answer has
//    exactly R = max_answer_len() tokens and generation runs exactly R tokens;
//  * EOS-terminated tasks (eos() >= 0): the answer ends with the EOS token, which is part of it
//    and counted in its length; generation ends at EOS or at the length limit (rl.max_response_len),
//    and a response that reaches the limit without EOS is truncated. The long reasoning tasks
//    (bubble) always end at EOS; the fixed-length ones gain an EOS after their R values with
//    task.eos = true (then EOS always comes at position R).
// Token ids are small integers below vocab_size(); the model's vocabulary may be larger (unused ids
// are then never the answer, so a well-trained policy learns to avoid them).
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
  int length = 8;             // sort/reverse/bubble: values per prompt; modadd: digits per operand
  int base = 10;              // value range [0, base) (sort/reverse/bubble) or digit base (modadd)
  bool partial_credit = false;  // reward = share of correct answer positions instead of 0/1
  bool eos = false;           // sort/reverse/modadd: the answer ends with EOS (bubble always does)
  void validate() const;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual const char* name() const = 0;
  virtual int vocab_size() const = 0;      // ids used, separator and EOS included
  virtual int prompt_len() const = 0;      // P
  virtual int max_answer_len() const = 0;  // the longest answer, EOS included (R of fixed-length tasks)
  virtual int eos() const { return -1; }   // the EOS id; -1: fixed-length answers without EOS
  bool ends_at_eos() const { return eos() >= 0; }
  // Writes prompt [P] and answer [max_answer_len()] of example `index` of a split (0 = train,
  // 1 = eval, 2 = supervised warm-up); returns the answer's length (EOS included). Entries of the
  // answer past its length are left as they are.
  virtual int example(int32_t* prompt, int32_t* answer, uint64_t seed, int split,
                      uint64_t index) const = 0;
  // Human-readable rendering of a token sequence, for docs and debugging.
  virtual std::string render(const int32_t* tokens, int n) const;
  // Whether a response [n] has the answer's form: for EOS tasks it ends with EOS and has no EOS
  // before; tasks add their own rules (bubble: a separator after every n values). A response that
  // is not well formed gets reward 0.
  virtual bool well_formed(const int32_t* response, int n) const;

  // Fixed length: 1 if response == answer else 0; with partial credit the share of equal
  // positions. EOS tasks: 0 unless well formed; else 1 if equal (lengths included), and with
  // partial credit the equal positions over the longer of the two lengths.
  float reward(const int32_t* answer, int answer_len, const int32_t* response, int response_len,
               bool partial) const;
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
std::string task_names();    // "bubble, modadd, reverse, sort"
std::string task_key_doc();  // doc of the task.name key

}  // namespace moerl
