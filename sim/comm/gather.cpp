// gather.cpp — see gather.h.
#include "sim/comm/gather.h"

#include <string>

namespace moerl {

namespace {
template <class T>
void rows(std::vector<T>* v, Collectives& dp) {
  *v = collectives_allgather(dp, *v);
}
}  // namespace

void gather_forward(ForwardResult* res, Collectives& dp, int L, bool moe, bool own_topk, bool router_logits,
                    bool router_top) {
  if (dp.size() == 1) return;
  rows(&res->logprobs, dp);
  rows(&res->logits, dp);
  rows(&res->logprobs_all, dp);
  if (!moe) return;
  res->topk_ids = gather_layers(dp, res->topk_ids, L);
  res->router_logp = gather_layers(dp, res->router_logp, L);
  if (own_topk) res->own_topk_ids = gather_layers(dp, res->own_topk_ids, L);
  if (router_logits) res->router_logits = gather_layers(dp, res->router_logits, L);
  if (router_top) res->router_top = gather_layers(dp, res->router_top, L);
}

void gather_rollout(RolloutBatch* rb, Collectives& dp, int L, bool moe) {
  if (dp.size() == 1) return;
  int64_t S = 0;
  for (int64_t n : collectives_gather_counts(dp, rb->S)) S += n;
  rb->S = static_cast<int>(S);
  rows(&rb->len, dp);
  rows(&rb->truncated, dp);
  rows(&rb->tokens, dp);
  rows(&rb->logp, dp);
  rows(&rb->logp_all, dp);
  rows(&rb->entropy, dp);
  if (moe) {
    rb->topk_ids = gather_layers(dp, rb->topk_ids, L);
    rb->router_logp = gather_layers(dp, rb->router_logp, L);
  }
}

void gather_experts(std::vector<float>* data, const ParamStore& layout, int E, Collectives& ep) {
  if (ep.size() == 1 || E <= 0) return;
  const ExpertRange mine = ep_experts(E, ep.size(), ep.rank());
  for (const ParamInfo& info : layout.infos()) {
    const std::string& n = info.name;
    if (!n.ends_with(".moe.w_gate") && !n.ends_with(".moe.w_up") && !n.ends_with(".moe.w_down"))
      continue;
    const int64_t per = info.size / E;
    const std::vector<float> slice(data->begin() + info.offset + per * mine.begin,
                                   data->begin() + info.offset + per * mine.end);
    const std::vector<int64_t> counts(static_cast<size_t>(ep.size()), per * mine.size());
    ep.allgatherv(data->data() + info.offset, counts.data(), slice.data());
  }
}

}  // namespace moerl
