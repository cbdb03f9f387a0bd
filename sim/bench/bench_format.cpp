// bench_format.cpp — the report of `moerl bench` as a table (bench_format_table) and as JSON
// (bench_format_json), each a list of named sections in the order they are printed.
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include "kernels/backend.h"
#include "kernels/simd.h"
#include "sim/bench/bench.h"
#include "sim/cli/cli.h"

namespace moerl {

namespace {

// printf into the stream (the tables' columns are printf widths).
template <typename... A>
void put(std::ostringstream& o, const char* f, A... a) {
  char line[512];
  std::snprintf(line, sizeof(line), f, a...);
  o << line;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// A step's name in the tables: its profile (rollout + train when they differ), after "long " for
// the long workload.
std::string step_label(const BenchStep& s, bool name_short = false) {
  const std::string p = s.rollout_profile == s.train_profile ? s.rollout_profile
                                                              : s.rollout_profile + " + " + s.train_profile;
  return s.workload == "short" && !name_short ? p : s.workload + " " + p;
}

// The analytic FLOPs of a step's phase (0 rollout, 1 train): its workload's padded batch.
double step_flops(const BenchReport& r, const BenchStep& s, int phase) {
  const BenchWorkload* w = r.find_workload(s.workload);
  if (!w) return phase == 0 ? r.flops_rollout : r.flops_train;
  return phase == 0 ? w->flops_rollout : w->flops_train;
}

// Query-key pairs the attention of a phase computes per layer, whole batch: the train forward
// T·(T+1)/2 per sequence; the rollout's prefill P·(P+1)/2, then a decode step at position p
// attends over p + 1 keys.
double attention_pairs(const BenchWorkload& w, int phase, bool compacted) {
  if (phase == 1) return w.pairs_train_real;  // the train forward runs packed
  if (compacted) return w.pairs_rollout_real;
  const int steps = w.B > 0 ? static_cast<int>(w.decode_computed / w.B) : 0;
  double pairs = 0.5 * w.P * (w.P + 1.0);
  for (int r = 0; r < steps; ++r) pairs += w.P + r + 1.0;
  return w.B * pairs;
}

// Long against short under one profile: per phase (0 rollout, 1 train fwd+bwd, 2 whole step) the
// seconds per real token long ÷ short, and what it is made of: the padding (computed ÷ real
// positions, long ÷ short), the non-attention seconds per computed position and the attention
// seconds per query-key pair (long ÷ short; ≈ 1 where a phase grows as its arithmetic does).
// Positions a phase computed (0 rollout: the prefill and the decode batch's rows; 1 train; 2 the
// step, as the train): the packed train forward computes the real tokens, the decode batch its
// real rows when compacted.
double computed_positions(const BenchWorkload& w, const BenchStep& s, int ph) {
  if (ph == 0) return static_cast<double>(w.B) * w.P + (s.compacted ? w.decode_real : w.decode_computed);
  return static_cast<double>(w.tokens_real);
}

// Every step of a workload other than "short" that has a "short" twin under the same profiles:
// fn(short workload, short step, its workload, the step).
template <class Fn>
void for_each_long_step(const BenchReport& r, Fn fn) {
  const BenchWorkload* ws = r.find_workload("short");
  if (!ws) return;
  for (const BenchStep& sl : r.steps) {
    const BenchWorkload* wl = r.find_workload(sl.workload);
    const BenchStep* ss = sl.workload != "short" ? r.step(sl.rollout_profile, sl.train_profile, "short") : nullptr;
    if (wl && ss) fn(*ws, *ss, *wl, sl);
  }
}

struct TokenCost {
  double per_real[3] = {0, 0, 0}, padding[3] = {0, 0, 0}, rest_per_computed[3] = {0, 0, 0};
  double attention_per_pair[2] = {0, 0};
};

TokenCost token_cost(const BenchWorkload& ws, const BenchStep& ss, const BenchWorkload& wl, const BenchStep& sl) {
  TokenCost c;
  auto phase = [](const BenchWorkload& w, const BenchStep& s, int ph, double* sec, double* att, double* computed) {
    *sec = ph == 0 ? s.rollout_s : ph == 1 ? s.train_s : s.total_s;
    *att = ph == 0 ? s.attention_rollout_s : ph == 1 ? s.attention_train_s : s.attention_rollout_s + s.attention_train_s;
    *computed = computed_positions(w, s, ph);
  };
  for (int ph = 0; ph < 3; ++ph) {
    double s_sec, s_att, s_comp, l_sec, l_att, l_comp;
    phase(ws, ss, ph, &s_sec, &s_att, &s_comp);
    phase(wl, sl, ph, &l_sec, &l_att, &l_comp);
    c.per_real[ph] = (l_sec / wl.tokens_real) / (s_sec / ws.tokens_real);
    c.padding[ph] = (l_comp / wl.tokens_real) / (s_comp / ws.tokens_real);
    c.rest_per_computed[ph] = ((l_sec - l_att) / l_comp) / ((s_sec - s_att) / s_comp);
    if (ph < 2)
      c.attention_per_pair[ph] = (l_att / attention_pairs(wl, ph, sl.compacted)) / (s_att / attention_pairs(ws, ph, ss.compacted));
  }
  return c;
}

// A decode-step profile in bins of equal step counts: first and last key count, mean step and
// attention seconds.
struct DecodeBin {
  int keys_lo = 0, keys_hi = 0;
  double step_s = 0, attention_s = 0;
};

std::vector<DecodeBin> decode_bins(const BenchStep& s, int P) {
  const int n = static_cast<int>(s.decode_step_s.size());
  const int nb = std::max(1, std::min(8, n / 8));
  std::vector<DecodeBin> bins;
  for (int b = 0; b < nb && n > 0; ++b) {
    const int k0 = b * n / nb, k1 = (b + 1) * n / nb;
    DecodeBin d;
    d.keys_lo = P + k0 + 1;  // step k attends over P + k + 1 keys
    d.keys_hi = P + k1;
    for (int k = k0; k < k1; ++k) {
      d.step_s += s.decode_step_s[k];
      d.attention_s += s.decode_attention_s[k];
    }
    d.step_s /= (k1 - k0);
    d.attention_s /= (k1 - k0);
    bins.push_back(d);
  }
  return bins;
}

// A phase's seconds by kind of op (kernels/ops.def), and what ran outside any op.
struct OpGroups {
  double linear = 0, attention = 0, other = 0, outside = 0;
};

OpGroups op_groups(const std::vector<double>& ops, double phase_s) {
  OpGroups g;
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const Op op = static_cast<Op>(i);
    const bool linear = op == Op::linear_pack_weight || op == Op::linear_forward || op == Op::linear_forward_grouped ||
                        op == Op::linear_backward || op == Op::linear_backward_grouped;
    const bool attention = op == Op::attention_forward || op == Op::attention_backward || op == Op::attention_decode;
    (linear ? g.linear : attention ? g.attention : g.other) += ops[i];
  }
  g.outside = phase_s - g.linear - g.attention - g.other;
  return g;
}


// --- the table -----------------------------------------------------------------------------

// What was timed, on what: the model, the batch (and where it came from), the machine, the ceilings.
void table_header(std::ostringstream& o, const BenchReport& r) {
  o << "moerl bench: " << r.workload << "\n";
  o << "model: " << r.model << "\n";
  o << "cpu: " << r.cpu << "; SIMD target " << r.simd << " (available: " << cli_join(simd_targets_available(), ", ")
    << ")\n";
  o << "RL step" << (r.shape_derived ? " of the scenario" : "") << " (" << r.shape_from << "): rollout of " << r.B
    << " sequences (prefill " << r.P << " + " << r.R << " sampled tokens, KV cache), then "
    << (r.minibatches > 1 ? std::to_string(r.minibatches) + " mini-batches of " : std::string())
    << "forward + backward + AdamW over the " << r.B << " x " << r.T << " tokens\n";
  if (const BenchWorkload* w = r.find_workload("long"))
    o << "long answers: the same prompts, responses ending at EOS (token " << w->eos << ") at lengths spread evenly over "
      << "1.." << 2 * w->mean_len - 1 << " (mean " << w->mean_len << "), limit " << w->R_max
      << "; decode until the longest ends (a finished row leaves the decode batch under a row-independent profile), "
         "train packed: each sequence over its own prompt + response, the loss on each response's own tokens\n";
  if (const BenchWorkload* w = r.find_workload("long-fixed"))
    o << "long-fixed: the same prompts, every response " << w->R_max
      << " tokens (no EOS, no padding): the long answers' real tokens at one length\n";
  put(o, "machine: %d thread(s) x %d rank(s), %s; load average %.2f %.2f %.2f at start, %.2f %.2f %.2f at end\n",
      r.threads, r.ranks, r.blas.c_str(), r.load_begin[0], r.load_begin[1], r.load_begin[2], r.load_end[0],
      r.load_end[1], r.load_end[2]);
  if (r.gpu_n > 0) {
    put(o, "GPU GEMM ceiling (cuBLAS, n = %d, timed with CUDA events, best of the rounds): SGEMM FP32 %.1f GFLOP/s "
           "(the FP32 peak: %.1f), BF16 tensor cores %.1f GFLOP/s -> FP32 ceiling %.1f GFLOP/s\n",
        r.gpu_n, r.ceiling_blas, r.fp32_peak, r.ceiling_bf16, r.ceiling);
    if (r.fp32_peak > 0 && r.ceiling_blas > 1.05 * r.fp32_peak)
      o << "WARNING: the SGEMM rate is above the GPU's FP32 peak: the measurement is wrong\n";
  } else {
    put(o, "FP32 GEMM ceiling (best of the rounds): moerl kernel %.1f GFLOP/s, BLAS %.1f -> ceiling %.1f GFLOP/s\n",
        r.ceiling_own, r.ceiling_blas, r.ceiling);
  }
  if (r.ceiling_model_train > 0)
    put(o, "at the model's own GEMM sizes (moerl's FP32 kernel, each product alone): rollout %.1f GFLOP/s, "
           "train %.1f GFLOP/s\n", r.ceiling_model_rollout, r.ceiling_model_train);
  o << "\n";
}

void table_steps(std::ostringstream& o, const BenchReport& r) {
  put(o, "%-26s %-12s %9s %9s %9s %8s %10s\n", "RL step (best of rounds)", "", "total s", "rollout s", "fwd+bwd s",
      "AdamW s", "median s");
  for (const BenchStep& s : r.steps)
    put(o, "%-39s %9.3f %9.3f %9.3f %8.4f %10.3f\n", step_label(s).c_str(), s.total_s, s.rollout_s, s.train_s,
        s.optimizer_s, s.total_median_s);
  o << "\n";
}

// Each phase's rate against the n×n×n ceiling and against the ceiling at the model's own sizes
// (the short workload's; "-" for the long ones).
void table_phases(std::ostringstream& o, const BenchReport& r) {
  put(o, "%-34s %9s %9s %9s %9s %9s %9s\n", "phase", "seconds", "GFLOP", "GFLOP/s", "% ceil", "% model", "x floor");
  for (const BenchStep& s : r.steps) {
    if (s.rollout_profile != s.train_profile) continue;
    for (int ph = 0; ph < 2; ++ph) {
      const double sec = ph == 0 ? s.rollout_s : s.train_s;
      const double fl = step_flops(r, s, ph);
      const double gf = fl / sec * 1e-9;
      const double model_ceiling = ph == 0 ? r.ceiling_model_rollout : r.ceiling_model_train;
      const std::string model_share =
          s.workload == "short" && model_ceiling > 0 ? fmt("%8.1f%%", 100.0 * gf / model_ceiling) : "-";
      const std::string name = (ph == 0 ? "rollout " : "train fwd+bwd ") + step_label(s);
      put(o, "%-34s %9.3f %9.2f %9.1f %8.1f%% %9s %9.2f\n", name.c_str(), sec, fl * 1e-9, gf, 100.0 * gf / r.ceiling,
          model_share.c_str(), sec / (fl / (r.ceiling * 1e9)));
    }
  }
  o << "(% ceil: of the n x n x n FP32 GEMM ceiling; % model: of the ceiling at the model's own GEMM sizes, the\n"
       " train phase's backward products taken at their forward's rate)\n";
}

// Host↔device crossings of one step per phase and kind (a backend with a device only).
void table_transfers(std::ostringstream& o, const BenchReport& r) {
  for (const BenchStep& s : r.steps) {
    if (s.transfer_bytes.empty()) continue;
    o << "\nhost<->device crossings of one RL step, MB (" << step_label(s) << "; kernels/transfers.h)\n";
    put(o, "%-13s", "phase");
    for (int k = 0; k < kCrossKinds; ++k) put(o, " %11s", cross_kind_name(static_cast<CrossKind>(k)));
    o << "\n";
    for (int p = 0; p < kTransferPhases; ++p) {
      const int64_t* row = s.transfer_bytes.data() + static_cast<size_t>(p) * kCrossKinds;
      int64_t any = 0;
      for (int k = 0; k < kCrossKinds; ++k) any += row[k];
      if (!any) continue;
      put(o, "%-13s", transfer_phase_name(static_cast<TransferPhase>(p)));
      for (int k = 0; k < kCrossKinds; ++k) put(o, " %11.3f", static_cast<double>(row[k]) * 1e-6);
      o << "\n";
    }
  }
}

void table_peer(std::ostringstream& o, const BenchReport& r) {
  const BenchStep* base = r.step("fp32-ref", "fp32-ref");
  if (!base || r.peer_rollout_s <= 0) return;
  o << "\n";
  const std::string head = "fp32 vs peer " + (r.peer_name.empty() ? std::string("(given times)") : r.peer_name);
  put(o, "%-34s %9s %9s %9s\n", head.c_str(), "peer s", "moerl s", "speed-up");
  const double pt = r.peer_rollout_s + r.peer_train_s, mt = base->train_s + base->optimizer_s;
  put(o, "%-34s %9.3f %9.3f %8.2fx\n", "rollout", r.peer_rollout_s, base->rollout_s, r.peer_rollout_s / base->rollout_s);
  put(o, "%-34s %9.3f %9.3f %8.2fx\n", "train (fwd+bwd+AdamW)", r.peer_train_s, mt, r.peer_train_s / mt);
  put(o, "%-34s %9.3f %9.3f %8.2fx\n", "RL step", pt, base->total_s, pt / base->total_s);
}

void table_workloads(std::ostringstream& o, const BenchReport& r) {
  o << "\nworkloads: real tokens = prompt + each response's own tokens (EOS included); the rest of B x T is padding "
       "(not computed: the step runs packed)\n";
  put(o, "%-10s %5s %6s %24s %6s %6s %5s %11s %10s %8s %8s %8s\n", "workload", "B", "prompt", "response mean/min/max",
      "limit", "trunc", "T", "real tokens", "computed", "pad tok", "pad dec", "pad FLOP");
  for (const BenchWorkload& w : r.workloads) {
    char resp[64];
    std::snprintf(resp, sizeof(resp), "%.1f / %d / %d", w.len_mean, w.len_min, w.len_max);
    put(o, "%-10s %5d %6d %24s %6d %6d %5d %11lld %10lld %7.1f%% %7.1f%% %7.1f%%\n", w.name.c_str(), w.B, w.P, resp,
        w.R_max, w.truncated, w.T, static_cast<long long>(w.tokens_real), static_cast<long long>(w.tokens_computed),
        100.0 * w.train_padding(), 100.0 * w.decode_padding(),
        100.0 * (1.0 - (w.flops_rollout_real + w.flops_train_real) / (w.flops_rollout + w.flops_train)));
  }
  o << "(the [B, T] layout's padding, which the packed step skips — pad tok: train positions; pad dec: rows of a masked\n"
       " decode batch; pad FLOP: the analytic FLOPs a masked step would spend on padding)\n\n";
}

void table_token_rates(std::ostringstream& o, const BenchReport& r) {
  put(o, "%-34s %12s %12s %12s %9s %9s\n", "real tokens per second (best)", "rollout", "fwd+bwd", "RL step",
      "attn% rol", "attn% trn");
  for (const BenchStep& s : r.steps) {
    const BenchWorkload* w = r.find_workload(s.workload);
    if (!w) continue;
    const double n = static_cast<double>(w->tokens_real);
    put(o, "%-34s %12.0f %12.0f %12.0f %8.1f%% %8.1f%%\n", step_label(s, true).c_str(), n / s.rollout_s,
        n / s.train_s, n / s.total_s, 100.0 * s.attention_rollout_s / s.rollout_s,
        100.0 * s.attention_train_s / s.train_s);
  }
}

// Long against short under one profile, per real token, and what it is made of.
void table_token_cost(std::ostringstream& o, const BenchReport& r) {
  for_each_long_step(r, [&](const BenchWorkload& ws, const BenchStep& ss, const BenchWorkload& wl, const BenchStep& sl) {
    const TokenCost c = token_cost(ws, ss, wl, sl);
    const std::string head = sl.workload + " / short, " + step_label(ss, false);
    put(o, "\n%-36s %10s %9s %15s %15s\n", head.c_str(), "s/real tok", "padding", "other s/comp", "attn s/pair");
    const char* names[3] = {"rollout", "train fwd+bwd", "RL step"};
    for (int ph = 0; ph < 3; ++ph) {
      const std::string att = ph < 2 ? fmt("%.2fx", c.attention_per_pair[ph]) : "-";
      put(o, "%-36s %9.2fx %8.2fx %14.2fx %15s\n", names[ph], c.per_real[ph], c.padding[ph], c.rest_per_computed[ph],
          att.c_str());
    }
    o << "(s/real tok = padding x the cost per computed position; other s/comp: seconds outside attention per\n"
         " computed position; attn s/pair: attention seconds per query-key pair — both ~1x where a phase grows\n"
         " as its arithmetic does)\n";
  });
}

void table_time_split(std::ostringstream& o, const BenchReport& r) {
  put(o, "\n%-34s %9s %9s %9s %9s %9s\n", "where the time goes (s, best round)", "phase", "linear", "attention",
      "other ops", "outside");
  for (const BenchStep& s : r.steps) {
    if (!r.find_workload(s.workload) || s.ops_train_s.empty()) continue;
    for (int ph = 0; ph < 2; ++ph) {
      const OpGroups g = op_groups(ph == 0 ? s.ops_rollout_s : s.ops_train_s, ph == 0 ? s.rollout_s : s.train_s);
      put(o, "%-34s %9s %9.3f %9.3f %9.3f %9.3f\n", (ph == 0 ? step_label(s, true) : std::string()).c_str(),
          ph == 0 ? "rollout" : "fwd+bwd", g.linear, g.attention, g.other, g.outside);
    }
  }
  o << "(linear: the linear layers' GEMMs and weight packing; other ops: norms, RoPE, softmax, SwiGLU, top-k,\n"
       " log-probs, embedding; outside: the model's own loops, copies and zero-fills, the MoE dispatch, sampling)\n";
}

// The same split per computed position, long against short.
void table_time_split_long(std::ostringstream& o, const BenchReport& r) {
  for_each_long_step(r, [&](const BenchWorkload& ws, const BenchStep& ss, const BenchWorkload& wl, const BenchStep& sl) {
    if (ss.ops_train_s.empty() || sl.ops_train_s.empty()) return;
    const std::string head = sl.workload + " / short per computed position, " + step_label(ss);
    put(o, "%-52s %9s %9s %9s\n", head.c_str(), "linear", "other ops", "outside");
    for (int ph = 0; ph < 2; ++ph) {
      const OpGroups gs = op_groups(ph == 0 ? ss.ops_rollout_s : ss.ops_train_s, ph == 0 ? ss.rollout_s : ss.train_s);
      const OpGroups gl = op_groups(ph == 0 ? sl.ops_rollout_s : sl.ops_train_s, ph == 0 ? sl.rollout_s : sl.train_s);
      const double cs = computed_positions(ws, ss, ph), cl = computed_positions(wl, sl, ph);
      put(o, "%-52s %8.2fx %8.2fx %8.2fx\n", ph == 0 ? "rollout" : "train fwd+bwd", (gl.linear / cl) / (gs.linear / cs),
          (gl.other / cl) / (gs.other / cs), (gl.outside / cl) / (gs.outside / cs));
    }
  });
}

void table_decode_profile(std::ostringstream& o, const BenchReport& r) {
  bool head = false;
  for (const BenchStep& s : r.steps) {
    const BenchWorkload* w = r.find_workload(s.workload);
    if (!w || s.decode_step_s.empty() || s.rollout_profile != s.train_profile) continue;
    if (!head) {
      o << "\ndecode step time against its context (best of the rounds, step by step; prefill apart)\n";
      put(o, "%-34s %11s %10s %10s %12s\n", "workload / profile", "keys", "step ms", "attn ms", "attn us/key");
      head = true;
    }
    for (const DecodeBin& d : decode_bins(s, w->P)) {
      const std::string keys = std::to_string(d.keys_lo) + "-" + std::to_string(d.keys_hi);
      put(o, "%-34s %11s %10.3f %10.3f %12.3f\n", step_label(s, true).c_str(), keys.c_str(), 1e3 * d.step_s,
          1e3 * d.attention_s, 1e6 * d.attention_s / (0.5 * (d.keys_lo + d.keys_hi)));
    }
  }
}

// The R3 record's size and what a run holds: how many runs share a node.
void table_memory(std::ostringstream& o, const BenchReport& r) {
  o << "\n";
  if (r.routing_bits > 0)
    put(o, "R3 routing record: %d bits per (layer, token) -> %lld bytes per step packed vs %lld as int32 (%.1fx smaller)\n",
        r.routing_bits, static_cast<long long>(r.routing_bytes), static_cast<long long>(r.routing_bytes_int32),
        static_cast<double>(r.routing_bytes_int32) / static_cast<double>(r.routing_bytes));
  put(o, "memory per run (rank 0): peak RSS of the step %.1f MiB (%.1f MiB before the model was built; %.1f MiB at the "
         "end, with the ceilings' matrices)\n", r.peak_rss_step_mib, r.rss_start_mib, r.peak_rss_mib);
  put(o, "  held by design: parameters %.2f MiB, gradients %.2f MiB, AdamW moments %.2f MiB, rollout KV cache %.2f MiB\n",
      mib(r.params_bytes), mib(r.grads_bytes), mib(r.optimizer_bytes), mib(r.kv_bytes));
  put(o, "peak memory (maxrss, rank 0): %.1f MiB\n", r.peak_rss_mib);
}

void table_targets(std::ostringstream& o, const BenchReport& r) {
  if (r.targets.empty()) return;
  o << "\ntargets:\n";
  for (const BenchTarget& t : r.targets)
    put(o, "  [%s] %-48s %8.2f%s (%s %.2f%s)\n", t.pass ? "PASS" : "MISS", t.name.c_str(), t.value, t.unit.c_str(),
        t.at_least ? ">=" : "<=", t.limit, t.unit.c_str());
}


// --- the JSON ------------------------------------------------------------------------------

std::string num(double v) { return fmt("%.6g", v); }

std::string num_list(const std::vector<double>& v) {
  std::string a = "[";
  for (size_t k = 0; k < v.size(); ++k) a += (k ? ", " : "") + num(v[k]);
  return a + "]";
}

void json_header(std::ostringstream& o, const BenchReport& r) {
  o << "  \"workload\": \"" << json_escape(r.workload) << "\",\n";
  o << "  \"model\": \"" << json_escape(r.model) << "\",\n";
  o << "  \"sequences\": " << r.B << ", \"seq_len\": " << r.T << ", \"prompt_len\": " << r.P
    << ", \"decode_steps\": " << r.R << ", \"minibatches\": " << r.minibatches << ",\n";
  o << "  \"shape_derived\": " << (r.shape_derived ? "true" : "false") << ", \"shape_from\": \""
    << json_escape(r.shape_from) << "\",\n";
  o << "  \"threads\": " << r.threads << ", \"ranks\": " << r.ranks << ", \"blas\": \"" << json_escape(r.blas)
    << "\", \"simd\": \"" << json_escape(r.simd) << "\", \"cpu\": \"" << json_escape(r.cpu) << "\",\n";
  o << "  \"load_begin\": [" << num(r.load_begin[0]) << ", " << num(r.load_begin[1]) << ", " << num(r.load_begin[2])
    << "], \"load_end\": [" << num(r.load_end[0]) << ", " << num(r.load_end[1]) << ", " << num(r.load_end[2]) << "],\n";
  o << "  \"ceiling_gflops\": " << num(r.ceiling) << ", \"ceiling_own_gflops\": " << num(r.ceiling_own)
    << ", \"ceiling_blas_gflops\": " << num(r.ceiling_blas) << ",\n";
  if (r.gpu_n > 0)
    o << "  \"gpu_gemm_n\": " << r.gpu_n << ", \"ceiling_bf16_gflops\": " << num(r.ceiling_bf16)
      << ", \"fp32_peak_gflops\": " << num(r.fp32_peak) << ",\n";
  o << "  \"ceiling_model_rollout_gflops\": " << num(r.ceiling_model_rollout) << ", \"ceiling_model_train_gflops\": "
    << num(r.ceiling_model_train) << ",\n";
  o << "  \"flops_rollout\": " << num(r.flops_rollout) << ", \"flops_train\": " << num(r.flops_train) << ",\n";
}

// The model's GEMM shapes with their measured rates, per phase.
void json_shapes(std::ostringstream& o, const BenchReport& r) {
  for (int ph = 0; ph < 2; ++ph) {
    const std::vector<GemmShape>& v = ph == 0 ? r.shapes_rollout : r.shapes_train;
    o << "  \"" << (ph == 0 ? "gemm_shapes_rollout" : "gemm_shapes_train") << "\": [";
    for (size_t i = 0; i < v.size(); ++i)
      o << (i ? ",\n    " : "\n    ") << "{\"name\": \"" << json_escape(v[i].name) << "\", \"M\": " << v[i].M
        << ", \"N\": " << v[i].N << ", \"K\": " << v[i].K << ", \"count\": " << num(v[i].count)
        << ", \"gflops\": " << num(v[i].gflops) << "}";
    o << (v.empty() ? "],\n" : "\n  ],\n");
  }
}

void json_workloads(std::ostringstream& o, const BenchReport& r) {
  o << "  \"workloads\": [\n";
  for (size_t i = 0; i < r.workloads.size(); ++i) {
    const BenchWorkload& w = r.workloads[i];
    o << "    {\"name\": \"" << json_escape(w.name) << "\", \"sequences\": " << w.B << ", \"prompt_len\": " << w.P
      << ", \"response_limit\": " << w.R_max << ", \"eos\": " << w.eos << ", \"mean_len_target\": " << w.mean_len
      << ", \"decode_positions\": " << w.R << ", \"seq_len\": " << w.T << ",\n     \"len_mean\": " << num(w.len_mean)
      << ", \"len_min\": " << w.len_min << ", \"len_max\": " << w.len_max << ", \"truncated\": " << w.truncated
      << ", \"tokens_real\": " << w.tokens_real << ", \"tokens_computed\": " << w.tokens_computed
      << ", \"decode_rows_real\": " << w.decode_real << ", \"decode_rows_computed\": " << w.decode_computed
      << ",\n     \"train_padding\": " << num(w.train_padding()) << ", \"decode_padding\": " << num(w.decode_padding())
      << ", \"flops_rollout\": " << num(w.flops_rollout) << ", \"flops_train\": " << num(w.flops_train)
      << ", \"flops_rollout_real\": " << num(w.flops_rollout_real) << ", \"flops_train_real\": "
      << num(w.flops_train_real) << "}" << (i + 1 < r.workloads.size() ? "," : "") << "\n";
  }
  o << "  ],\n";
}

// One step: its times, its real-token rates and ceiling shares, attention, decode steps and ops.
void json_step(std::ostringstream& o, const BenchReport& r, const BenchStep& s) {
  o << "    {\"rollout_profile\": \"" << json_escape(s.rollout_profile) << "\", \"train_profile\": \""
    << json_escape(s.train_profile) << "\", \"total_s\": " << num(s.total_s) << ", \"rollout_s\": " << num(s.rollout_s)
    << ", \"train_s\": " << num(s.train_s) << ", \"optimizer_s\": " << num(s.optimizer_s)
    << ", \"total_median_s\": " << num(s.total_median_s) << ",\n     \"workload\": \"" << json_escape(s.workload) << "\"";
  if (const BenchWorkload* w = r.find_workload(s.workload)) {
    // 0 for a phase not timed (--phase rollout | train): JSON has no inf
    auto rate = [&](double sec) { return num(sec > 0 ? static_cast<double>(w->tokens_real) / sec : 0.0); };
    o << ", \"tokens_per_s_rollout\": " << rate(s.rollout_s) << ", \"tokens_per_s_train\": " << rate(s.train_s)
      << ", \"tokens_per_s_step\": " << rate(s.total_s);
  }
  for (int ph = 0; ph < 2; ++ph) {
    const double sec = ph == 0 ? s.rollout_s : s.train_s;
    const double gf = sec > 0 ? step_flops(r, s, ph) / sec * 1e-9 : 0.0;
    const double mc = ph == 0 ? r.ceiling_model_rollout : r.ceiling_model_train;
    o << ", \"" << (ph == 0 ? "rollout" : "train") << "_ceiling_share\": " << num(r.ceiling > 0 ? gf / r.ceiling : 0.0)
      << ", \"" << (ph == 0 ? "rollout" : "train") << "_model_ceiling_share\": "
      << num(s.workload == "short" && mc > 0 ? gf / mc : 0.0);
  }
  o << ", \"attention_rollout_s\": " << num(s.attention_rollout_s) << ", \"attention_train_s\": "
    << num(s.attention_train_s) << ", \"prefill_s\": " << num(s.prefill_s) << ",\n     \"decode_step_s\": "
    << num_list(s.decode_step_s) << ",\n     \"decode_attention_s\": " << num_list(s.decode_attention_s);
  for (int ph = 0; ph < 2; ++ph) {
    const std::vector<double>& v = ph == 0 ? s.ops_rollout_s : s.ops_train_s;
    o << ",\n     \"" << (ph == 0 ? "ops_rollout_s" : "ops_train_s") << "\": {";
    for (size_t k = 0; k < v.size(); ++k) o << (k ? ", " : "") << "\"" << op_name(static_cast<Op>(k)) << "\": " << num(v[k]);
    o << "}";
  }
  if (!s.transfer_bytes.empty()) {  // {"rollout": {"activations": bytes, …}, …}, phases with a crossing
    o << ",\n     \"transfer_bytes\": {";
    bool first = true;
    for (int p = 0; p < kTransferPhases; ++p) {
      const int64_t* row = s.transfer_bytes.data() + static_cast<size_t>(p) * kCrossKinds;
      int64_t any = 0;
      for (int k = 0; k < kCrossKinds; ++k) any += row[k];
      if (!any) continue;
      o << (first ? "" : ", ") << "\"" << transfer_phase_name(static_cast<TransferPhase>(p)) << "\": {";
      first = false;
      for (int k = 0; k < kCrossKinds; ++k)
        o << (k ? ", " : "") << "\"" << cross_kind_name(static_cast<CrossKind>(k)) << "\": " << row[k];
      o << "}";
    }
    o << "}";
  }
  o << "}";
}

void json_steps(std::ostringstream& o, const BenchReport& r) {
  o << "  \"steps\": [\n";
  for (size_t i = 0; i < r.steps.size(); ++i) {
    json_step(o, r, r.steps[i]);
    o << (i + 1 < r.steps.size() ? "," : "") << "\n";
  }
  o << "  ],\n";
}

void json_token_cost(std::ostringstream& o, const BenchReport& r) {
  o << "  \"token_cost\": [";
  bool first = true;
  for_each_long_step(r, [&](const BenchWorkload& ws, const BenchStep& ss, const BenchWorkload& wl, const BenchStep& sl) {
    const TokenCost c = token_cost(ws, ss, wl, sl);
    o << (first ? "\n" : ",\n") << "    {\"workload\": \"" << json_escape(sl.workload) << "\", \"rollout_profile\": \""
      << json_escape(sl.rollout_profile) << "\", \"train_profile\": \"" << json_escape(sl.train_profile) << "\"";
    const char* names[3] = {"rollout", "train", "step"};
    for (int ph = 0; ph < 3; ++ph)
      o << ", \"" << names[ph] << "\": {\"per_real_token\": " << num(c.per_real[ph]) << ", \"padding\": "
        << num(c.padding[ph]) << ", \"other_per_computed\": " << num(c.rest_per_computed[ph])
        << (ph < 2 ? ", \"attention_per_pair\": " + num(c.attention_per_pair[ph]) : std::string()) << "}";
    o << "}";
    first = false;
  });
  o << (first ? "],\n" : "\n  ],\n");
}

void json_memory(std::ostringstream& o, const BenchReport& r) {
  o << "  \"routing_bits\": " << r.routing_bits << ", \"routing_bytes\": " << r.routing_bytes
    << ", \"routing_bytes_int32\": " << r.routing_bytes_int32 << ",\n";
  o << "  \"peak_rss_mib\": " << num(r.peak_rss_mib) << ", \"peak_rss_step_mib\": " << num(r.peak_rss_step_mib)
    << ", \"rss_start_mib\": " << num(r.rss_start_mib) << ",\n";
  o << "  \"params_bytes\": " << r.params_bytes << ", \"grads_bytes\": " << r.grads_bytes << ", \"optimizer_bytes\": "
    << r.optimizer_bytes << ", \"kv_bytes\": " << r.kv_bytes << ",\n";
}

void json_peer_and_targets(std::ostringstream& o, const BenchReport& r) {
  o << "  \"peer\": \"" << json_escape(r.peer_name) << "\", \"peer_rollout_s\": " << num(r.peer_rollout_s)
    << ", \"peer_train_s\": " << num(r.peer_train_s) << ",\n";
  o << "  \"targets\": [\n";
  for (size_t i = 0; i < r.targets.size(); ++i) {
    const BenchTarget& t = r.targets[i];
    o << "    {\"name\": \"" << json_escape(t.name) << "\", \"value\": " << num(t.value) << ", \"limit\": "
      << num(t.limit) << ", \"at_least\": " << (t.at_least ? "true" : "false") << ", \"pass\": "
      << (t.pass ? "true" : "false") << ", \"unit\": \"" << json_escape(t.unit) << "\"}"
      << (i + 1 < r.targets.size() ? "," : "") << "\n";
  }
  o << "  ]\n";
}

}  // namespace

std::string bench_format_table(const BenchReport& r) {
  std::ostringstream o;
  table_header(o, r);
  table_steps(o, r);
  table_phases(o, r);
  table_transfers(o, r);
  table_peer(o, r);
  table_workloads(o, r);
  table_token_rates(o, r);
  table_token_cost(o, r);
  table_time_split(o, r);
  table_time_split_long(o, r);
  table_decode_profile(o, r);
  table_memory(o, r);
  table_targets(o, r);
  return o.str();
}

std::string bench_format_json(const BenchReport& r) {
  std::ostringstream o;
  o << "{\n";
  json_header(o, r);
  json_shapes(o, r);
  json_workloads(o, r);
  json_steps(o, r);
  json_token_cost(o, r);
  json_memory(o, r);
  json_peer_and_targets(o, r);
  o << "}\n";
  return o.str();
}

}  // namespace moerl
