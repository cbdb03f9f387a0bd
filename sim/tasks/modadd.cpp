// modadd.cpp — modular addition of two n-digit numbers in a base, digits most significant first:
// "a_1..a_n + b_1..b_n =" → the n lowest digits of a + b (the sum mod base^n). Tokens: digits
// 0..base-1, '+' = base, '=' = base+1, EOS = base+2 (task.eos = true: after the n digits).
#include "kernels/rng.h"
#include "sim/tasks/task.h"

namespace moerl {
namespace {
class ModAdd final : public Task {
 public:
  explicit ModAdd(const TaskConfig& c) : n_(c.length), base_(c.base), eos_(c.eos) {}
  const char* name() const override { return "modadd"; }
  int vocab_size() const override { return base_ + (eos_ ? 3 : 2); }
  int prompt_len() const override { return 2 * n_ + 2; }
  int max_answer_len() const override { return n_ + (eos_ ? 1 : 0); }
  int eos() const override { return eos_ ? base_ + 2 : -1; }
  int example(int32_t* prompt, int32_t* answer, uint64_t seed, int split,
              uint64_t index) const override {
    Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::data), {static_cast<uint64_t>(split), index}));
    for (int i = 0; i < n_; ++i) prompt[i] = static_cast<int32_t>(rng.below(base_));
    prompt[n_] = base_;
    for (int i = 0; i < n_; ++i) prompt[n_ + 1 + i] = static_cast<int32_t>(rng.below(base_));
    prompt[2 * n_ + 1] = base_ + 1;
    int carry = 0;
    for (int i = n_ - 1; i >= 0; --i) {  // least significant digit last
      const int s = prompt[i] + prompt[n_ + 1 + i] + carry;
      answer[i] = s % base_;
      carry = s / base_;
    }
    if (eos_) answer[n_] = base_ + 2;
    return max_answer_len();
  }
  std::string render(const int32_t* t, int n) const override {
    std::string s;
    for (int i = 0; i < n; ++i) {
      if (t[i] == base_) s += " + ";
      else if (t[i] == base_ + 1) s += " = ";
      else if (t[i] == base_ + 2) s += " <eos>";
      else s += std::to_string(t[i]) + (base_ > 10 ? " " : "");
    }
    return s;
  }

 private:
  int n_, base_;
  bool eos_;
};
}  // namespace
std::unique_ptr<Task> make_modadd_task(const TaskConfig& cfg) { return std::make_unique<ModAdd>(cfg); }
}  // namespace moerl
