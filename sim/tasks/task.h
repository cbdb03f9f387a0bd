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

#include "kernels/enum_names.h"

namespace moerl {

// What the reward compares with the reference: the whole response (its working and its answer),
// or only its final answer (Task::final_answer_len), the working left ungraded as a math verifier
// checks only the boxed answer.
enum class RewardOn : uint8_t { response = 0, final_answer };
inline constexpr EnumNames<RewardOn, 2> kRewardOnNames{{"response", "final_answer"}};
static_assert(static_cast<int>(RewardOn::final_answer) + 1 == kRewardOnNames.size());

struct TaskConfig {
  std::string name = "sort";  // a name of the task table (task_registry)
  int length = 8;             // sort/reverse/bubble: values per prompt; modadd: digits per operand
  int base = 10;              // value range [0, base) (sort/reverse/bubble) or digit base (modadd)
  bool partial_credit = false;  // reward = share of correct answer positions instead of 0/1
  RewardOn reward_on = RewardOn::response;
  bool eos = false;           // sort/reverse/modadd: the answer ends with EOS (bubble always does)
  void validate() const;
};

// What a response got right beyond its reward (docs/metrics.md, "What the answers get right"): the
// measures that tell a partial-credit reward that pays for the working from one that pays for the
// answer. A response that is not well formed is wrong on every count.
struct AnswerGrade {
  bool well_formed = false;
  bool exact = false;            // equal to the reference, its length included (the 0/1 reward)
  bool final_correct = false;    // its final answer equals the reference's, whatever the working
  bool working_correct = false;  // every token it shares with the reference is equal, where
                                 // either ends aside: at most it stops too early or too late
  int stop = 0;                  // sign(response length − reference length): −1 early, +1 late
  float partial = 0.0f;          // the partial-credit reward
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
  // on = final_answer compares only the final answers (the last final_answer_len() tokens of
  // each): 1 if equal, with partial credit the equal positions over its length; 0 unless well
  // formed and at least that long. Only on a task with working (has_working); elsewhere it is
  // the whole response's reward.
  float reward(const int32_t* answer, int answer_len, const int32_t* response, int response_len,
               bool partial, RewardOn on = RewardOn::response) const;
  // The answer's final answer: its last final_answer_len() tokens (EOS included). The whole
  // answer by default; bubble: the last pass and EOS (the sorted list), after the working.
  virtual int final_answer_len(int answer_len) const { return answer_len; }
  // Whether an answer writes working before its final answer (bubble: the passes). On a task
  // without working the final answer is the whole answer, and anything written before it is not
  // working but junk: the final-answer reward and grade are then the exact ones (lengths included).
  virtual bool has_working() const { return false; }
  AnswerGrade grade(const int32_t* answer, int answer_len, const int32_t* response, int response_len) const;
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
