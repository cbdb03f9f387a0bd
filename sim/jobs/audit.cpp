// audit.cpp — routing-flip and distribution-mismatch metrics, and their reports.
#include "sim/jobs/audit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernels/cuda/hd/mismatch.h"
#include "models/router.h"
#include "store/h5io.h"

namespace moerl {

bool audit_topk_sets_differ(const int32_t* a, const int32_t* b, int K) {
  // K is small (≤ 8 in practice): sort copies and compare.
  std::vector<int32_t> sa(a, a + K), sb(b, b + K);
  std::sort(sa.begin(), sa.end());
  std::sort(sb.begin(), sb.end());
  return sa != sb;
}

void audit_init(AuditAccum* acc, int n_layers) {
  *acc = AuditAccum{};
  acc->n_layers = n_layers;
  acc->layer_flips.assign(static_cast<size_t>(n_layers), 0);
}

void audit_add_routing(AuditAccum* acc, const int32_t* ids_a, const int32_t* ids_b,
                       const uint8_t* mask, int L, int N, int K) {
  for (int n = 0; n < N; ++n) {
    if (mask && !mask[n]) continue;
    int flipped = 0;
    for (int l = 0; l < L; ++l) {
      const int64_t off = (static_cast<int64_t>(l) * N + n) * K;
      if (audit_topk_sets_differ(ids_a + off, ids_b + off, K)) {
        ++acc->layer_flips[static_cast<size_t>(l)];
        ++flipped;
      }
    }
    ++acc->routing_tokens;
    acc->flipped_pairs += flipped;
    if (flipped > 0) ++acc->tokens_with_flip;
  }
}

void audit_add_margins(AuditAccum* acc, const int32_t* ids_a, const int32_t* ids_b, const float* top_b,
                       const uint8_t* mask, int L, int N, int K) {
  for (int l = 0; l < L; ++l)
    for (int n = 0; n < N; ++n) {
      if (mask && !mask[n]) continue;
      const int64_t r = static_cast<int64_t>(l) * N + n;
      acc->margin.push_back(top_b[r * 2] - top_b[r * 2 + 1]);
      acc->margin_flip.push_back(audit_topk_sets_differ(ids_a + r * K, ids_b + r * K, K) ? 1 : 0);
    }
}

void audit_add_load(AuditAccum* acc, const int32_t* ids_b, const uint8_t* mask, int L, int N, int K, int E) {
  if (acc->load.empty()) acc->load.assign(static_cast<size_t>(L) * E, 0);
  acc->n_experts = E;
  for (int l = 0; l < L; ++l)
    for (int n = 0; n < N; ++n) {
      if (mask && !mask[n]) continue;
      for (int k = 0; k < K; ++k) ++acc->load[static_cast<size_t>(l) * E + ids_b[(static_cast<int64_t>(l) * N + n) * K + k]];
    }
}

void audit_add_logprobs(AuditAccum* acc, const float* logits_a, const float* logits_b,
                        const int32_t* targets, const uint8_t* mask, int N, int V) {
  for (int n = 0; n < N; ++n) {
    if (mask && !mask[n]) continue;
    double kl = 0.0, log_r = 0.0;
    cuda::hd_kl_row(&kl, &log_r, logits_a + static_cast<int64_t>(n) * V, logits_b + static_cast<int64_t>(n) * V,
                    targets[n], V);
    audit_add_row(acc, kl, log_r);
  }
}

void audit_add_row(AuditAccum* acc, double kl, double log_r) {
  static const double log_extreme = std::log(kAuditExtremeRatio);
  acc->kl_sum += kl;
  acc->k3_sum += std::expm1(log_r) - log_r;  // r − 1 − log r, accurate for small log r
  if (std::fabs(log_r) > log_extreme) ++acc->extreme;
  acc->max_abs_dlogp = std::max(acc->max_abs_dlogp, std::fabs(log_r));
  ++acc->logprob_tokens;
}

AuditMetrics audit_finish(const AuditAccum& acc) {
  AuditMetrics m;
  m.layer_flips = acc.layer_flips;
  m.routing_tokens = acc.routing_tokens;
  const double rt = acc.routing_tokens > 0 ? static_cast<double>(acc.routing_tokens) : 1.0;
  double worst = -1.0;
  for (int l = 0; l < acc.n_layers; ++l) {
    const double r = static_cast<double>(acc.layer_flips[static_cast<size_t>(l)]) / rt;
    m.flip_rate.push_back(r);
    if (r > worst) { worst = r; m.worst_layer = l; }
  }
  m.any_flip_share = static_cast<double>(acc.tokens_with_flip) / rt;
  m.mean_flipped_layers = static_cast<double>(acc.flipped_pairs) / rt;
  m.alarm = worst > kAuditAlarmFlipRate;
  m.tokens = acc.logprob_tokens;
  const double lt = acc.logprob_tokens > 0 ? static_cast<double>(acc.logprob_tokens) : 1.0;
  m.kl = acc.kl_sum / lt;
  m.k3 = acc.k3_sum / lt;
  m.extreme_share = static_cast<double>(acc.extreme) / lt;
  m.max_abs_dlogp = acc.max_abs_dlogp;
  if (!acc.margin.empty()) {
    // pairs in margin order (ties by position): fifths of that order, and the quantiles
    const size_t n = acc.margin.size();
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return acc.margin[a] < acc.margin[b]; });
    double sum = 0.0;
    for (float x : acc.margin) sum += x;
    m.has_margins = true;
    m.router_margin_mean = sum / static_cast<double>(n);
    m.router_margin_p10 = acc.margin[order[(n - 1) / 10]];
    m.router_margin_p50 = acc.margin[order[(n - 1) / 2]];
    for (int q = 0; q < 5; ++q) {
      const size_t lo = n * q / 5, hi = n * (q + 1) / 5;
      double flips = 0.0;
      for (size_t i = lo; i < hi; ++i) flips += acc.margin_flip[order[i]];
      m.flip_rate_by_margin.push_back(hi > lo ? flips / static_cast<double>(hi - lo) : 0.0);
    }
  }
  if (!acc.load.empty()) {
    const ExpertLoadStats st = expert_load_stats(acc.load.data(), acc.n_layers, acc.n_experts);
    m.has_load = true;
    m.load_cv = st.cv;
    m.load_max_over_mean = st.max_over_mean;
    m.dead_experts = st.dead;
  }
  return m;
}

// ---- reports -----------------------------------------------------------------------------------

namespace {
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) o += fmt("\\u%04x", static_cast<unsigned char>(c));
        else o += c;
    }
  }
  return o;
}

std::string alarm_line(const AuditMetrics& m) {
  return "ALARM: routing flip rate above 2% (layer " + std::to_string(m.worst_layer) + ": " +
         fmt("%.2f%%", 100.0 * m.flip_rate[static_cast<size_t>(m.worst_layer)]) + ")";
}
}  // namespace

std::string audit_format_table(const AuditMetrics& m, const AuditInfo& info) {
  std::string o;
  o += "audit of " + info.checkpoint + ": A = " + info.profile_a + ", B = " + info.profile_b + "\n";
  o += "tokens: " + info.tokens_source + ", " + std::to_string(info.sequences) + " sequences, " +
       info.positions + "\n\n";
  auto row = [&](const std::string& name, const std::string& value) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "  %-38s %14s\n", name.c_str(), value.c_str());
    o += buf;
  };
  if (!m.flip_rate.empty()) {
    o += "routing (" + std::to_string(m.routing_tokens) + " tokens)\n";
    for (size_t l = 0; l < m.flip_rate.size(); ++l)
      row("layer " + std::to_string(l) + " flip rate", fmt("%.3f%%", 100.0 * m.flip_rate[l]));
    row("tokens with >= 1 flipped layer", fmt("%.3f%%", 100.0 * m.any_flip_share));
    row("mean flipped layers per token", fmt("%.4f", m.mean_flipped_layers));
    if (m.has_margins) {
      o += "router margins under B (K-th - (K+1)-th logit)\n";
      row("mean / median / 10th percentile", fmt("%.4f", m.router_margin_mean) + " / " + fmt("%.4f", m.router_margin_p50) +
                                                 " / " + fmt("%.4f", m.router_margin_p10));
      std::string fifths;
      for (double r : m.flip_rate_by_margin) fifths += (fifths.empty() ? "" : " ") + fmt("%.2f%%", 100.0 * r);
      row("flip rate by margin fifth (small first)", fifths);
    }
    if (m.has_load) {
      o += "expert load under B (audited positions)\n";
      row("load CV (mean over layers)", fmt("%.3f", m.load_cv));
      row("max / mean (largest layer)", fmt("%.2f", m.load_max_over_mean));
      row("dead (layer, expert) pairs", std::to_string(m.dead_experts));
    }
  } else {
    o += "routing: dense model, no routing to compare\n";
  }
  o += "log-probs (" + std::to_string(m.tokens) + " tokens)\n";
  row("KL(A||B), full vocabulary", fmt("%.3e", m.kl));
  row("k3 on the target tokens", fmt("%.3e", m.k3));
  row("tokens with ratio > 2", fmt("%.4f%%", 100.0 * m.extreme_share));
  row("max |log p_A - log p_B|", fmt("%.3e", m.max_abs_dlogp));
  if (m.alarm) o += alarm_line(m) + "\n";
  return o;
}

std::string audit_format_json(const AuditMetrics& m, const AuditInfo& info) {
  auto num = [](double v) { return fmt("%.17g", v); };
  std::string o = "{\n";
  o += "  \"format\": \"moerl-audit\",\n  \"version\": 1,\n";
  o += "  \"checkpoint\": \"" + json_escape(info.checkpoint) + "\",\n";
  o += "  \"profile_a\": \"" + json_escape(info.profile_a) + "\",\n";
  o += "  \"profile_b\": \"" + json_escape(info.profile_b) + "\",\n";
  o += "  \"tokens_source\": \"" + json_escape(info.tokens_source) + "\",\n";
  o += "  \"positions\": \"" + json_escape(info.positions) + "\",\n";
  o += "  \"sequences\": " + std::to_string(info.sequences) + ",\n";
  o += "  \"routing_tokens\": " + std::to_string(m.routing_tokens) + ",\n";
  o += "  \"flip_rate\": [";
  for (size_t l = 0; l < m.flip_rate.size(); ++l) o += (l ? ", " : "") + num(m.flip_rate[l]);
  o += "],\n  \"layer_flips\": [";
  for (size_t l = 0; l < m.layer_flips.size(); ++l)
    o += (l ? ", " : "") + std::to_string(m.layer_flips[l]);
  o += "],\n";
  o += "  \"any_flip_share\": " + num(m.any_flip_share) + ",\n";
  o += "  \"mean_flipped_layers\": " + num(m.mean_flipped_layers) + ",\n";
  o += "  \"tokens\": " + std::to_string(m.tokens) + ",\n";
  o += "  \"kl\": " + num(m.kl) + ",\n";
  o += "  \"k3\": " + num(m.k3) + ",\n";
  o += "  \"extreme_share\": " + num(m.extreme_share) + ",\n";
  o += "  \"max_abs_dlogp\": " + num(m.max_abs_dlogp) + ",\n";
  if (m.has_margins) {
    o += "  \"router_margin_mean\": " + num(m.router_margin_mean) + ",\n";
    o += "  \"router_margin_p10\": " + num(m.router_margin_p10) + ",\n";
    o += "  \"router_margin_p50\": " + num(m.router_margin_p50) + ",\n";
    o += "  \"flip_rate_by_margin\": [";
    for (size_t q = 0; q < m.flip_rate_by_margin.size(); ++q) o += (q ? ", " : "") + num(m.flip_rate_by_margin[q]);
    o += "],\n";
  }
  if (m.has_load) {
    o += "  \"load_cv\": " + num(m.load_cv) + ",\n";
    o += "  \"load_max_over_mean\": " + num(m.load_max_over_mean) + ",\n";
    o += "  \"dead_experts\": " + std::to_string(m.dead_experts) + ",\n";
  }
  o += std::string("  \"alarm\": ") + (m.alarm ? "true" : "false") + ",\n";
  o += "  \"scenario\": \"" + json_escape(info.scenario) + "\"\n}\n";
  return o;
}

void audit_write_h5(const std::string& path, const AuditMetrics& m, const AuditInfo& info) {
  H5File f = H5File::create(path);
  f.set_attr("/", "format", "moerl-audit");
  f.set_attr("/", "version", int64_t{1});
  f.set_attr("/", "checkpoint", info.checkpoint);
  f.set_attr("/", "profile_a", info.profile_a);
  f.set_attr("/", "profile_b", info.profile_b);
  f.set_attr("/", "tokens_source", info.tokens_source);
  f.set_attr("/", "positions", info.positions);
  f.set_attr("/", "sequences", info.sequences);
  f.set_attr("/", "routing_tokens", m.routing_tokens);
  f.set_attr("/", "any_flip_share", m.any_flip_share);
  f.set_attr("/", "mean_flipped_layers", m.mean_flipped_layers);
  f.set_attr("/", "tokens", m.tokens);
  f.set_attr("/", "kl", m.kl);
  f.set_attr("/", "k3", m.k3);
  f.set_attr("/", "extreme_share", m.extreme_share);
  f.set_attr("/", "max_abs_dlogp", m.max_abs_dlogp);
  f.set_attr("/", "alarm", int64_t{m.alarm ? 1 : 0});
  if (m.has_margins) {
    f.set_attr("/", "router_margin_mean", m.router_margin_mean);
    f.set_attr("/", "router_margin_p10", m.router_margin_p10);
    f.set_attr("/", "router_margin_p50", m.router_margin_p50);
    f.write("flip_rate_by_margin", {static_cast<int64_t>(m.flip_rate_by_margin.size())}, m.flip_rate_by_margin.data());
  }
  if (m.has_load) {
    f.set_attr("/", "load_cv", m.load_cv);
    f.set_attr("/", "load_max_over_mean", m.load_max_over_mean);
    f.set_attr("/", "dead_experts", m.dead_experts);
  }
  f.set_attr("/", "scenario", info.scenario);
  const int64_t L = static_cast<int64_t>(m.flip_rate.size());
  f.write("flip_rate", {L}, m.flip_rate.data());
  f.write("layer_flips", {L}, m.layer_flips.data());
  f.commit();
}

}  // namespace moerl
