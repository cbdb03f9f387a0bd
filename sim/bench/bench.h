// bench.h — the measurements behind `moerl bench`: the reference workload's RL step (rollout with
// the KV cache and sampling, then forward + backward + AdamW over the same sequences) under
// several numerics profiles, beside the machine's FP32 GEMM ceiling measured in the same run, the
// analytic FLOP floors of each phase, the packed R3 routing record's size and the peak memory —
// and the performance targets of docs/performance.md checked against them. The short workload's
// batch is the scenario's [bench] section or, for a scenario without one, its own RL step
// (bench_shape.h); beside the n×n×n ceiling the report has the ceiling at the model's own GEMM
// sizes (gemm_shapes.h) and the memory a run holds. The table and the JSON: bench_format.cpp.
//
// Timing on a shared machine: every measured item runs once per round, the rounds interleave
// all items (so a burst of foreign load hits every item alike), and each number is the best
// (minimum) over the rounds — the time the code needs when it gets the cores. Medians are kept
// too. Parameters and optimizer moments are restored before every step, so every round does the
// same work (same routing, same expert loads).
//
// Two workloads (sim/bench/workload.h): "short", the reference step, and "long", responses of
// their own length (mean 128, limit 256 by default) ending at EOS. Both are reported in real
// tokens per second (prompt + each response's own tokens, not padding), with the padding share,
// the attention share of each phase (timed through BenchBackend) and the time of every decode
// step against its context.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/parallel.h"
#include "sim/bench/bench_shape.h"
#include "sim/bench/gemm_shapes.h"
#include "sim/bench/workload.h"
#include "sim/scenario/scenario.h"

namespace moerl {

struct BenchOptions {
  int rounds = 5;                 // timed rounds (after one untimed warm-up round)
  int gemm_n = 1024;              // n of the n×n×n ceiling product (the CPU's)
  int gpu_gemm_n = 8192;          // n of the GPU's (run.backend = cuda): large enough to fill it
  double gemm_seconds = 0.25;     // minimum time of one ceiling measurement (per round); each of
                                  // the model's GEMM shapes gets a tenth of it (gemm_shapes.h)
  // The short workload's batch: the scenario's RL step (bench_shape_derive) instead of its
  // [bench] section (bench_shape.h; `moerl bench --scenario` derives when the file has none).
  bool derive_shape = false;
  // Profiles whose RL step (rollout and train under the same profile) is timed; fp32-ref is the
  // baseline of the profile-cost ratios. The recipe step (engines.rollout + engines.train) is
  // timed too when `recipe` is set and it differs from those.
  std::vector<std::string> profiles{"fp32-ref", "bf16-train", "fp8-rollout"};
  bool recipe = true;
  // The peer's times for the same step (analysis/bench/torch_peer.py), 0 when not given.
  double peer_rollout_s = 0.0, peer_train_s = 0.0;
  std::string peer_name;
  bool progress = false;          // a line per round on stderr
  // "step" (default), or only "rollout" / "train" (+ AdamW) in the timed rounds — for profiling
  // one phase (the train phase then runs over the warm-up rollout's sequences).
  std::string phase = "step";
  int local_rank = 0;             // this rank's index on its node (its GPU with run.backend = cuda)
  // Workloads timed, of "short", "long", "long-fixed" (sim/bench/workload.h). The short one runs
  // under `profiles` (and the recipe), the long ones under `long_profiles` only: a long step is
  // ≈ 10× the short one's, with ≈ 5× the peak memory.
  std::vector<std::string> workloads{"short"};
  std::vector<std::string> long_profiles{"fp32-ref"};
  int long_mean = 128;            // long: response lengths spread evenly over 1 … 2·long_mean − 1
  int long_max = 256;             // long: the response limit R_max (≥ 2·long_mean − 1)
};

// One RL step configuration, best of the rounds: each part is its own minimum, total the minimum
// of whole steps.
struct BenchStep {
  std::string workload = "short";
  std::string rollout_profile, train_profile;
  // The decode batch dropped its finished rows (the rollout profile is row-independent,
  // models/sites.h); the train forward always runs packed (each sequence its own positions).
  bool compacted = false;
  double total_s = 0, rollout_s = 0, train_s = 0, optimizer_s = 0;  // train = forward + backward
  double total_median_s = 0;
  // Seconds in the attention ops (BenchBackend), best of the rounds, of the rollout (prefill and
  // decode) and of the train forward + backward.
  double attention_rollout_s = 0, attention_train_s = 0;
  // Each decode step (BenchBackend::step_seconds; step k attends over P + k + 1 keys) and its
  // attention, best of the rounds step by step; the prefill.
  std::vector<double> decode_step_s, decode_attention_s;
  double prefill_s = 0;
  // [kOpCount] seconds in each backend op (kernels/ops.def order), of the round whose rollout /
  // train phase was the best; the phase's time less their sum ran outside any op.
  std::vector<double> ops_rollout_s, ops_train_s;
  // Host↔device bytes of one step (the warm-up's) on a backend with a device (kernels/transfers.h),
  // [phase][kind] flattened (kTransferPhases × kCrossKinds, both directions); empty on the CPU.
  std::vector<int64_t> transfer_bytes;
};

struct BenchTarget {
  std::string name;   // what is compared
  double value = 0;   // measured
  double limit = 0;
  bool at_least = true;  // value ≥ limit passes (else value ≤ limit)
  bool pass = false;
  std::string unit;   // "x", "% of ceiling", ...
};

struct BenchReport {
  std::string workload;  // scenario path or "built-in"
  std::string model;     // one-line model description
  int B = 0, T = 0, P = 0, R = 0;  // the short workload's sequences, train length, prompt, generated tokens
  int minibatches = 1;             // optimizer steps over the batch in the train phase
  bool shape_derived = false;      // the batch is the scenario's RL step (else its [bench] section)
  std::string shape_from;          // where the batch came from (BenchShape::from)
  int threads = 0, ranks = 1;
  std::string blas;
  std::string simd;  // the CPU kernels' instruction set (kernels/simd.h)
  std::string cpu;   // the CPU model (/proc/cpuinfo)
  double load_begin[3] = {0, 0, 0}, load_end[3] = {0, 0, 0};  // /proc/loadavg
  double ceiling_blas = 0, ceiling_own = 0, ceiling = 0;      // GFLOP/s, whole machine, n×n×n
  // On run.backend = cuda (gpu_n > 0): ceiling_blas is cuBLAS SGEMM (FP32, pedantic, no TF32),
  // ceiling_own is 0 (moerl has no GEMM kernel of its own there), ceiling_bf16 the BF16
  // tensor-core GEMM — all timed with CUDA events (cuda::gemm_measure_tflops) — and fp32_peak the
  // GPUs' FP32 FMA peak (SMs × lanes × 2 × clock, summed over ranks). `ceiling`, which every FP32
  // share is taken against, is the SGEMM: never the BF16 rate.
  int gpu_n = 0;
  double ceiling_bf16 = 0, fp32_peak = 0;
  // The ceiling at the model's own sizes (gemm_shapes.h): each linear-layer product of the short
  // workload's phases timed alone (exact FP32 kernel, summed over ranks), and each phase's
  // FLOP-weighted harmonic mean; 0 on a GPU.
  std::vector<GemmShape> shapes_rollout, shapes_train;
  double ceiling_model_rollout = 0, ceiling_model_train = 0;
  double flops_rollout = 0, flops_train = 0;                   // analytic, whole batch (short)
  std::vector<BenchWorkload> workloads;                        // those timed, in option order
  std::vector<BenchStep> steps;                                // the short workload's first
  int routing_bits = 0;             // per (layer, token)
  int64_t routing_bytes = 0;        // packed record of one step's rollout (header included)
  int64_t routing_bytes_int32 = 0;  // the same ids as int32
  // Memory of a run (rank 0): the process's resident set before the model was built and its peak
  // after every step ran once (before the ceilings' matrices), the peak at the end; and what
  // the run holds by design, in bytes: parameters, gradients, AdamW's two moments, the rollout's
  // KV cache (the largest workload's). Runs sharing a node each need about peak_rss_step_mib.
  double rss_start_mib = 0, peak_rss_step_mib = 0;
  double peak_rss_mib = 0;
  int64_t params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0, kv_bytes = 0;
  double peer_rollout_s = 0, peer_train_s = 0;
  std::string peer_name;
  std::vector<BenchTarget> targets;

  const BenchStep* step(const std::string& rollout, const std::string& train,
                        const std::string& workload = "short") const;
  const BenchWorkload* find_workload(const std::string& name) const;
};

// Runs the measurements on every rank of par's groups (collectively); the report is complete on
// rank 0. Throws std::invalid_argument on a bench section (or, with o.derive_shape, an RL batch)
// that does not fit the model.
BenchReport bench_run(const Scenario& s, const std::string& workload, const BenchOptions& o,
                      const ModelParallel& par);

std::string bench_format_table(const BenchReport& r);
std::string bench_format_json(const BenchReport& r);

}  // namespace moerl
