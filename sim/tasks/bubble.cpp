// bubble.cpp — a long reasoning task: sort n values by writing every pass of bubble sort, each pass
// followed by a separator, until the pass just written is sorted, which is followed by EOS:
//   "3 1 2 0 |" → "1 2 0 3 | 1 0 2 3 | 0 1 2 3 <eos>".
// One pass walks the list once and swaps each out-of-order neighbour pair, so it carries the
// largest value seen so far to the right. The answer has K passes of n + 1 tokens, K in
// [1, max(n − 1, 1)]: its length depends on the problem (how far the smallest values have to
// travel left), from n + 1 for a sorted list to (n − 1)(n + 1) for a reversed one. Tokens: values
// 0..base-1, separator = base, EOS = base + 1.
#include <algorithm>

#include "kernels/rng.h"
#include "sim/tasks/task.h"

namespace moerl {
namespace {
class Bubble final : public Task {
 public:
  explicit Bubble(const TaskConfig& c) : n_(c.length), base_(c.base) {}
  const char* name() const override { return "bubble"; }
  int vocab_size() const override { return base_ + 2; }
  int prompt_len() const override { return n_ + 1; }
  int max_answer_len() const override { return std::max(n_ - 1, 1) * (n_ + 1); }
  int eos() const override { return base_ + 1; }
  // The sorted list and EOS: the last pass, which the passes before it work out.
  int final_answer_len(int answer_len) const override { return std::min(n_ + 1, answer_len); }
  bool has_working() const override { return true; }
  int example(int32_t* prompt, int32_t* answer, uint64_t seed, int split,
              uint64_t index) const override {
    Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::data), {static_cast<uint64_t>(split), index}));
    for (int i = 0; i < n_; ++i) prompt[i] = static_cast<int32_t>(rng.below(base_));
    prompt[n_] = base_;  // separator
    std::vector<int32_t> x(prompt, prompt + n_);
    int len = 0;
    while (true) {
      for (int i = 0; i + 1 < n_; ++i)
        if (x[i] > x[i + 1]) std::swap(x[i], x[i + 1]);
      std::copy(x.begin(), x.end(), answer + len);
      len += n_;
      const bool sorted = std::is_sorted(x.begin(), x.end());
      answer[len++] = sorted ? base_ + 1 : base_;
      if (sorted) return len;
    }
  }
  // Passes of n values, a separator after each but the last, which EOS ends.
  bool well_formed(const int32_t* r, int n) const override {
    if (!Task::well_formed(r, n) || n % (n_ + 1) != 0) return false;
    for (int i = 0; i + 1 < n; ++i) {
      const bool sep_slot = (i + 1) % (n_ + 1) == 0;
      if (sep_slot ? r[i] != base_ : (r[i] < 0 || r[i] >= base_)) return false;
    }
    return true;
  }
  std::string render(const int32_t* t, int n) const override {
    std::string s;
    for (int i = 0; i < n; ++i) {
      if (i) s += ' ';
      s += t[i] == base_ ? "|" : t[i] == base_ + 1 ? "<eos>" : std::to_string(t[i]);
    }
    return s;
  }

 private:
  int n_, base_;
};
}  // namespace
std::unique_ptr<Task> make_bubble_task(const TaskConfig& cfg) { return std::make_unique<Bubble>(cfg); }
}  // namespace moerl
