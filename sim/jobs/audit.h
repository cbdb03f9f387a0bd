// audit.h — the numbers of `moerl audit`, as pure functions of top-k ids and logits (no model):
// routing flips between two profiles and the train–inference mismatch of their token
// distributions. Accumulates batch by batch; audit_finish turns the sums into the report.
//
// Definitions (docs/hdf5-schema.md, "Audit output", has them too). Over the audited positions:
//  * a (token, layer) pair flips when the top-k id SETS of A and B differ (order is ignored);
//    flip_rate[l] = flipped pairs in layer l / tokens;  any_flip_share = tokens with ≥ 1 flipped
//    layer / tokens;  mean_flipped_layers = flipped pairs / tokens;
//  * kl = mean over tokens of Σ_v p_a(v) log(p_a(v)/p_b(v)) on the full vocabulary (KL(A‖B));
//  * at the target token: log r = log p_b − log p_a, k3 = r − 1 − log r (mean; an unbiased
//    estimate of KL(A‖B) when the targets were sampled from A), extreme_share = share of tokens
//    with max(r, 1/r) > 2, max_abs_dlogp = max |log r|;
//  * alarm: some layer's flip rate > 2% (the practitioners' threshold);
//  * the router's margin under B (the train side) at each audited (token, layer) pair: its K-th
//    minus its (K+1)-th largest selection score (the logit under softmax scoring, σ(z) + b under
//    sigmoid scoring with the selection bias); router_margin_mean / _p10 / _p50 over the pairs, and the
//    flip rate of the pairs in each fifth of the margins (flip_rate_by_margin [5], smallest
//    margins first; the fifths are ranks of the sorted margins, ties split by position);
//  * B's expert load over the audited positions, per (layer, expert): load_cv (the layers' mean
//    of std/mean), load_max_over_mean (the largest over layers), dead_experts ((layer, expert)
//    pairs that receive nothing).
// Log-softmax and sums are computed in double; identical logits give exactly 0 everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moerl {

inline constexpr double kAuditAlarmFlipRate = 0.02;  // flip rate above which audits raise the alarm
inline constexpr double kAuditExtremeRatio = 2.0;    // max(r, 1/r) above this is "extreme"

// True when the K ids of a and b form different sets (each list holds distinct ids).
bool audit_topk_sets_differ(const int32_t* a, const int32_t* b, int K);

struct AuditAccum {
  int n_layers = 0;
  std::vector<int64_t> layer_flips;  // [L] flipped (token, layer) pairs
  int64_t routing_tokens = 0;        // tokens whose routing was compared
  int64_t tokens_with_flip = 0;
  int64_t flipped_pairs = 0;
  int64_t logprob_tokens = 0;        // tokens whose distributions were compared
  double kl_sum = 0.0;
  double k3_sum = 0.0;
  int64_t extreme = 0;
  double max_abs_dlogp = 0.0;
  // Margins and load (audit_add_margins, audit_add_load; empty when never added):
  std::vector<float> margin;          // B's K-th − (K+1)-th logit of every audited pair
  std::vector<uint8_t> margin_flip;   // 1 where that pair flipped
  int n_experts = 0;
  std::vector<int64_t> load;          // [L, E] B's routed (position, slot) pairs per expert
};

void audit_init(AuditAccum* acc, int n_layers);

// ids_a, ids_b: [L, N, K] top-k ids of N positions under A and B; mask: [N], nonzero = audited
// (nullptr = all).
void audit_add_routing(AuditAccum* acc, const int32_t* ids_a, const int32_t* ids_b,
                       const uint8_t* mask, int L, int N, int K);

// top_b: [L, N, 2] B's K-th and (K+1)-th largest selection scores of the same positions: each
// audited pair's margin and whether it flipped.
void audit_add_margins(AuditAccum* acc, const int32_t* ids_a, const int32_t* ids_b, const float* top_b,
                       const uint8_t* mask, int L, int N, int K);
// B's load: every audited position's K ids [L, N, K] counted per (layer, expert) of E.
void audit_add_load(AuditAccum* acc, const int32_t* ids_b, const uint8_t* mask, int L, int N, int K, int E);

// logits_a, logits_b: [N, V] rows predicting targets [N]; mask: [N] (nullptr = all).
void audit_add_logprobs(AuditAccum* acc, const float* logits_a, const float* logits_b,
                        const int32_t* targets, const uint8_t* mask, int N, int V);
// One position already reduced (kernels/cuda/hd/mismatch.h's hd_kl_row, on the host or by a
// backend's kl_rows): kl = KL(A‖B) over the vocabulary, log_r = log p_B/p_A at the target.
void audit_add_row(AuditAccum* acc, double kl, double log_r);

struct AuditMetrics {
  std::vector<double> flip_rate;  // [L]
  std::vector<int64_t> layer_flips;  // [L]
  int64_t routing_tokens = 0;
  double any_flip_share = 0.0;
  double mean_flipped_layers = 0.0;
  int64_t tokens = 0;  // log-prob tokens
  double kl = 0.0;
  double k3 = 0.0;
  double extreme_share = 0.0;
  double max_abs_dlogp = 0.0;
  bool alarm = false;
  int worst_layer = -1;  // layer of the highest flip rate (-1: dense model)
  bool has_margins = false;  // the fields below were measured (an MoE model with E > K)
  double router_margin_mean = 0.0, router_margin_p10 = 0.0, router_margin_p50 = 0.0;
  std::vector<double> flip_rate_by_margin;  // [5] smallest margins first
  bool has_load = false;
  double load_cv = 0.0, load_max_over_mean = 0.0;
  int64_t dead_experts = 0;
};

AuditMetrics audit_finish(const AuditAccum& acc);

// What was audited, for the reports.
struct AuditInfo {
  std::string checkpoint;
  std::string profile_a, profile_b;
  std::string tokens_source;  // a tokens file, or "sampled under <profile A>"
  std::string positions;      // e.g. "response positions 16..47"
  int64_t sequences = 0;
  std::string scenario;       // effective scenario text (may be empty)
};

// The terminal report: an aligned table, then the alarm line when raised.
std::string audit_format_table(const AuditMetrics& m, const AuditInfo& info);
// The same numbers as a JSON object (doubles with 17 significant digits).
std::string audit_format_json(const AuditMetrics& m, const AuditInfo& info);
// The same numbers in an HDF5 file (committed atomically): root attributes for scalars, datasets
// flip_rate [L] float64 and layer_flips [L] int64.
void audit_write_h5(const std::string& path, const AuditMetrics& m, const AuditInfo& info);

}  // namespace moerl
