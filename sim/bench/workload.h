// workload.h — the batches `moerl bench` times. Both run the bench model on the same prompts
// (bench.sequences × bench.prompt_len) through the RL step's rollout_generate, then forward +
// backward of the token-mean loss over each response's own tokens, then AdamW:
//  * short: the reference step of DESIGN.md — every response exactly bench.decode_steps tokens
//    (fixed length, no EOS), train length bench.seq_len;
//  * long:  long answers of their own length. Sequence s's response is ℓ_s tokens, EOS included:
//    the batch's lengths are the B quantiles of the uniform distribution on [1, 2·mean − 1]
//    (ℓ = 1 + ⌊(k + ½)·(2·mean − 1)/B⌋, k = 0..B−1: mean `mean` exactly — 128 by default, from 1
//    to 255 at B = 256), dealt to the sequences in an order drawn from the seeded
//    stream (run.seed, Stream::data, {kLengthStream}). Quantiles rather than B independent draws:
//    a draw of 256 has a mean of 128 ± 4.6, and the bench's token counts would move with the seed.
//    The same on every rank (each takes its block). The limit R_max (256 by default) is above
//    every ℓ_s, so nothing is truncated. EOS is token V − 1. An untrained model does not say EOS at a controlled rate, so the bench makes EOS
//    its token at ℓ_s − 1 and not before (BenchBackend edits that one logit); the rollout then
//    runs as in the RL step: a finished row leaves the decode batch (decode compaction, under a
//    row-independent profile such as fp32-ref; under any other it stays, fed EOS), the decode
//    loop ends with the longest response, the buffers are trimmed to it, and the train forward
//    runs packed — each sequence over its own P + ℓ_s positions of the [B, T] layout, T = P +
//    (the longest response) — the loss mask 1 on each response's own tokens only.
//  * long-fixed: the long workload's real tokens at one length — every response exactly `mean`
//    tokens (fixed length, no EOS, no padding): against long it isolates the padding, against
//    short the longer context.
// Real tokens are the prompt and each response's own tokens (EOS included); the layout's tokens
// are B·T (what a masked forward runs over); the rest is padding, which the packed step does not
// compute.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/config.h"

namespace moerl {

// One workload's batch, filled by bench_workload_measure from the rollout's lengths (every round
// generates the same batch: same parameters, prompts and sampling streams).
struct BenchWorkload {
  std::string name;       // "short" | "long" | "long-fixed"
  int B = 0, P = 0;       // sequences, prompt tokens
  int R_max = 0;          // response limit (short: its fixed length)
  int eos = -1;           // EOS token id; -1: fixed length R_max
  int mean_len = 0;       // long: the schedule's mean (0: fixed length)
  // after the rollout
  int R = 0, T = 0;       // decode positions run (the longest response), train length P + R
  double len_mean = 0.0;  // response lengths, EOS included
  int len_min = 0, len_max = 0;
  int truncated = 0;      // responses that reached R_max without EOS (the rollout's count)
  int64_t tokens_real = 0;       // Σ_s (P + ℓ_s)
  int64_t tokens_computed = 0;   // B·T: the [B, T] layout's positions (a masked forward's)
  int64_t decode_real = 0;       // rows of the decode steps that feed a response's own token
  int64_t decode_computed = 0;   // B × decode steps run (a masked decode batch's rows)
  double flops_rollout = 0.0, flops_train = 0.0;            // analytic, the padded batch (masked)
  double flops_rollout_real = 0.0, flops_train_real = 0.0;  // the same, each sequence alone (packed)
  // attention query-key pairs per layer, whole batch, each sequence over its own positions
  double pairs_rollout_real = 0.0, pairs_train_real = 0.0;

  double train_padding() const { return tokens_computed > 0 ? 1.0 - static_cast<double>(tokens_real) / tokens_computed : 0.0; }
  double decode_padding() const { return decode_computed > 0 ? 1.0 - static_cast<double>(decode_real) / decode_computed : 0.0; }
};

// The workload names, for messages; bench_workload_known(name): one of them.
inline constexpr const char* kBenchWorkloads = "short, long, long-fixed";
inline bool bench_workload_known(const std::string& name) {
  return name == "short" || name == "long" || name == "long-fixed";
}

// Coordinate of the length schedule's stream (Stream::data); the prompts use 0xBE7C4.
inline constexpr uint64_t kLengthStream = 0x1E46;

// ℓ_s for s = 0..B−1 (above). Throws std::invalid_argument when mean < 1 or B < 1.
std::vector<int32_t> bench_length_schedule(uint64_t seed, int B, int mean);

// Fills R, T, the length statistics, the token counts and the FLOPs from the responses' lengths
// len[B] (the whole batch) and the decode positions run R.
void bench_workload_measure(BenchWorkload* w, const ModelConfig& cfg, const int32_t* len, int R);

// dLoss/dlogp [n, T−1] of the token-mean loss −(1/N)·Σ log p over each response's own tokens,
// N the whole batch's response tokens: −1/N at positions P−1 .. P−2+len[s] (those scoring the
// response's tokens, EOS included), 0 at the prompt's other positions and at padding.
std::vector<float> bench_loss_dlogp(const int32_t* len, int n, int P, int T, int64_t N);

}  // namespace moerl
