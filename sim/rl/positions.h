// positions.h — where a response is scored. A sequence is prompt (P) + response (R) tokens,
// T = P + R. Response token r sits at position P+r; its log-prob is computed at position P−1+r,
// so a per-position log-prob array [n, T−1] holds the response's R log-probs at P−1 .. T−2.
// Routing metrics and RSPO's router shift read the same positions (the last prompt position,
// whose routing decides the first response token, included; the last position, whose output
// scores nothing, left out). Every slice of those positions goes through this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moerl {

struct ResponseSlice {
  int P = 0, R = 0, T = 0;  // T = P + R

  // Entry of response token r of sequence s in a per-position log-prob array [n, T−1].
  size_t logprob_at(int s, int r) const { return static_cast<size_t>(s) * (T - 1) + P - 1 + r; }
  // Row of the position scoring response token r of sequence s in a token-row array [n·T, ...]
  // (logits, router rows of one layer) ...
  size_t row_at(int s, int r) const { return static_cast<size_t>(s) * T + P - 1 + r; }
  // ... and the row of that token itself (in tokens [n, T]).
  size_t token_at(int s, int r) const { return row_at(s, r) + 1; }

  // [n, T−1] per-position log-probs → [n, R] log-probs of the response tokens.
  std::vector<float> response_logprobs(const std::vector<float>& per_position, int n) const {
    std::vector<float> out(static_cast<size_t>(n) * R);
    for (int s = 0; s < n; ++s)
      for (int r = 0; r < R; ++r) out[static_cast<size_t>(s) * R + r] = per_position[logprob_at(s, r)];
    return out;
  }
  // [n, R] gradient with respect to the response log-probs → [n, T−1] per position (0 elsewhere);
  // `first` is the row of dlogp where sequence 0 starts.
  std::vector<float> per_position_grad(const std::vector<float>& dlogp, int first, int n) const {
    std::vector<float> out(static_cast<size_t>(n) * (T - 1), 0.0f);
    for (int s = 0; s < n; ++s)
      for (int r = 0; r < R; ++r) out[logprob_at(s, r)] = dlogp[(static_cast<size_t>(first) + s) * R + r];
    return out;
  }
};

// The positions whose outputs score the response: response token r (at position P+r) gets its
// log-prob, and its routing-flip count, from position P−1+r. [S·T] mask, 1 at P−1..T−2, or, with
// the responses' lengths len [S], at P−1..P−2+len[s] (padding past a response's end scores nothing).
inline std::vector<uint8_t> rl_scored_positions_mask(int S, int P, int T, const int32_t* len = nullptr) {
  std::vector<uint8_t> mask(static_cast<size_t>(S) * T, 0);
  for (int s = 0; s < S; ++s) {
    const int end = len ? P - 1 + len[s] : T - 1;
    for (int t = P - 1; t < end; ++t) mask[static_cast<size_t>(s) * T + t] = 1;
  }
  return mask;
}

}  // namespace moerl
