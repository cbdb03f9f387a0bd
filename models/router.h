// router.h — the MoE router: logits → selection scores → top-k (own or replayed) → gate weights,
// and the load-balancing losses attached to it (reference §7.1–7.2, R3 replay §3.1).
//
// Forward writes its outputs with '='; backward accumulates dh and dW_r with '+='.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/linear.h"
#include "models/config.h"
#include "models/model.h"
#include "models/parallel.h"
#include "models/workspace.h"

namespace moerl {

// The router's activations live where the backend's ops run (ActBuffer: the device's memory on a
// GPU): the logits, scores and gate weights never cross. The ids come to the host (the dispatch
// plan, the load counts and the routing record read them) and stay beside it on the backend.
struct RouterActs {
  ActBuffer<float> logits;    // [N, E] z = W_r·h, rounded to the profile's router_logits format
  ActBuffer<float> scores;    // [N, E] softmax(z) (softmax scoring) or σ(z) (sigmoid scoring)
  std::vector<int32_t> ids;   // [N, K] selected experts, descending selection score (host)
  ActBuffer<int32_t> dev_ids; // [N, K] the same ids in the backend's memory
  ActBuffer<float> gate;      // [N, K] gate weights of the selected experts
  // [2, N, K] the router's own ids and its log-probs at the ids used (as float bits), side by side
  // where they are computed, for one read a layer; its host copy
  ActBuffer<int32_t> staged;
  std::vector<int32_t> staged_host;
  // the selection's scratch, kept from call to call (a recorded decode step allocates nothing):
  // the biased scores [N, E], the top-k values [N, K], the router's own ids while replaying [N, K]
  ActBuffer<float> biased, topk_vals;
  ActBuffer<int32_t> own_dev;
  int32_t* own_ids_out = nullptr;  // RouterCall::own_ids of the call in flight (normal mode)
  // The terms computed on the host (router.cpp: the aux losses, the z-loss, the KL regularisers,
  // the noise dial) read a host copy of the logits and scores, downloaded only when one is on.
  std::vector<float> aux_weight;  // [N, E] dL_aux/dp̂ (switch / sequence aux loss), for backward
  std::vector<float> kl_grad;     // [N, E] d(KL regularisers)/dz, for backward (empty when off)
};

struct RouterCall {
  const ModelConfig* cfg = nullptr;
  const NumericsProfile* profile = nullptr;
  LinearNumerics linear;           // numerics of the router GEMM
  NoiseKey topk_key;               // tie-break stream of this call
  RouterMode mode = RouterMode::normal;
  const int32_t* replay_ids = nullptr;  // [N, K] when mode == replay
  const float* bias = nullptr;     // [E] selection bias (cfg.expert_bias), or null
  int seq_len = 0;                 // T, for the sequence aux loss (N = B·T)
  bool training = false;           // compute aux-loss gradients' weights
  // Training: how sums over the batch's rows are formed (the aux losses' statistics f_e, P_e, the
  // z-loss and their normalisers cover the whole batch across data-parallel ranks). Null: this
  // call's N rows are the whole batch.
  const RowSums* rows = nullptr;
  const int32_t* probe_ids = nullptr;  // [N, K]: router_logp is taken at these ids (RSPO)
  float temperature = 1.0f;        // logits are divided by it before scoring (RouterControl)
  const float* kl_full_target = nullptr;  // [N, E] detached target logits (RouterControl)
  float kl_full_weight = 0.0f;
  const float* kl_topk_target = nullptr;  // [N, E]
  float kl_topk_weight = 0.0f;
  float kl_topk_temperature = 1.0f;
  bool regularisers = true;        // backward includes aux, z-loss and the KL regularisers
  bool balance = true;             // cfg.load_balance applies (RouterControl::load_balance)
  int32_t* own_ids = nullptr;      // [N, K]: the router's own top-k, written even when replaying
  const Backend* backend = nullptr;  // where the router's (and the MoE layer's) ops run; null: CPU
  // Resident routing (a device backend, one EP rank, no host-side terms): the layer's ids and its
  // log-probs at them are written here, [ids N·K | log-probs N·K] in the backend's memory, and
  // nothing of the layer is read on the host — acts.ids is left as it was, the dispatch draws its
  // offsets where the ids are (models/dispatcher.h) and the caller reads the routing of every
  // layer at once. router_logp and load must then be null.
  int32_t* stage = nullptr;
};

// h[N, D] → acts; router_logp[N, K] (log of softmax(z) at the ids used — or at probe_ids when
// given — may be null); load[E] += counts of the ids used;
// returns the layer's aux loss (load balancing + z-loss, coefficients included; 0 when off).
float router_forward(RouterActs* acts, float* router_logp, int64_t* load, const float* h,
                     const PackedWeight& w_router, int N, const RouterCall& call);

// dgate[N, K] (dLoss/dgate) → dh[N, D] +=, dw_router[E, D] +=; adds the aux and z-loss gradients.
// dw_router[c] receives the rows of chunk c of call.rows (one pointer when call.rows is null).
void router_backward(float* dh, const std::vector<float*>& dw_router, const float* dgate,
                     const RouterActs& acts, const float* h, const float* w_router, int N,
                     const RouterCall& call);

// The aux-loss-free expert bias's update (DeepSeek-V3, arXiv 2412.19437 §2.1.2; Megatron-LM's
// get_updated_expert_bias): per layer, b_e += u·sign(mean_j n_j − n_e) from the load n[L, E] of
// the forward the optimizer step just used. bias[L, E] +=.
void router_bias_update(float* bias, const int64_t* load, int L, int E, float rate);

// The balance of an expert load n[L, E]: cv = the layers' mean of std_e(n)/mean_e(n) (population
// std), max_over_mean = the largest max_e(n)/mean_e(n) over layers, dead = (layer, expert) pairs
// with n = 0 (docs/metrics.md, expert load).
struct ExpertLoadStats {
  double cv = 0.0, max_over_mean = 0.0;
  int dead = 0;
};
template <class N>
ExpertLoadStats expert_load_stats(const N* load, int L, int E) {
  ExpertLoadStats st;
  for (int l = 0; l < L; ++l) {
    double mean = 0.0, var = 0.0, mx = 0.0;
    for (int e = 0; e < E; ++e) mean += static_cast<double>(load[static_cast<size_t>(l) * E + e]);
    mean /= E;
    for (int e = 0; e < E; ++e) {
      const double x = static_cast<double>(load[static_cast<size_t>(l) * E + e]);
      var += (x - mean) * (x - mean);
      mx = std::max(mx, x);
      st.dead += x == 0.0;
    }
    st.cv += std::sqrt(var / E) / mean;
    st.max_over_mean = std::max(st.max_over_mean, mx / mean);
  }
  st.cv /= L;
  return st;
}

}  // namespace moerl
