// sequence_task.h — tasks over a list of n values in [0, base): prompt = values + separator,
// answer = a function of the values (sorted, reversed). Tokens: values 0..base-1, separator = base,
// EOS = base + 1 (task.eos = true: the answer's n values are followed by EOS).
#pragma once

#include <algorithm>

#include "kernels/rng.h"
#include "sim/tasks/task.h"

namespace moerl {

template <class Transform>
class SequenceTask : public Task {
 public:
  SequenceTask(const TaskConfig& c, const char* name) : n_(c.length), base_(c.base), eos_(c.eos), name_(name) {}
  const char* name() const override { return name_; }
  int vocab_size() const override { return base_ + (eos_ ? 2 : 1); }
  int prompt_len() const override { return n_ + 1; }
  int max_answer_len() const override { return n_ + (eos_ ? 1 : 0); }
  int eos() const override { return eos_ ? base_ + 1 : -1; }
  int example(int32_t* prompt, int32_t* answer, uint64_t seed, int split,
              uint64_t index) const override {
    Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::data), {static_cast<uint64_t>(split), index}));
    for (int i = 0; i < n_; ++i) prompt[i] = static_cast<int32_t>(rng.below(base_));
    prompt[n_] = base_;  // separator
    std::copy(prompt, prompt + n_, answer);
    Transform()(answer, answer + n_);
    if (eos_) answer[n_] = base_ + 1;
    return max_answer_len();
  }

 private:
  int n_, base_;
  bool eos_;
  const char* name_;
};

}  // namespace moerl
