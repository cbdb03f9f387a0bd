// model.cpp — Model construction, weight packing per profile, and the per-site numerics.
#include "models/model_impl.h"

#include <string>

namespace moerl {

std::string layer_prefix(int layer) { return "layers." + std::to_string(layer) + "."; }

namespace {
bool is_expert_tensor(const std::string& name) {
  for (const char* t : {".moe.w_gate", ".moe.w_up", ".moe.w_down"}) {
    const size_t n = std::char_traits<char>::length(t);
    if (name.size() >= n && name.compare(name.size() - n, n, t) == 0) return true;
  }
  return false;
}
}  // namespace

Model::Model(const ModelConfig& cfg) : cfg_(cfg), params_(cfg), grads_(cfg), impl_(new Impl) {
  cfg_.validate();
  expert_bias_.assign(static_cast<size_t>(cfg.n_layers) * std::max(cfg.n_experts, 0), 0.0f);
  impl_->dispatcher = std::make_unique<LocalDispatcher>();
  for (const ParamInfo& info : params_.infos()) {
    const bool expert = is_expert_tensor(info.name);
    impl_->dense_offset.push_back(expert ? -1 : impl_->dense_size);
    if (!expert) impl_->dense_size += info.size;
  }
}

Model::~Model() = default;

void Model::set_parallel(const ModelParallel& par) {
  par.validate(cfg_);
  par_ = par;
  if (par.ep_size() > 1) impl_->dispatcher = std::make_unique<CollectiveDispatcher>(par.ep);
  else impl_->dispatcher = std::make_unique<LocalDispatcher>();
  impl_->packed.clear();
}

ExpertRange Model::expert_range() const {
  return cfg_.is_moe() ? ep_experts(cfg_.n_experts, par_.ep_size(), par_.ep_rank()) : ExpertRange{};
}

void Model::invalidate_packed_weights() { impl_->packed.clear(); }

void Model::set_backend(const Backend& backend) {
  Impl& im = *impl_;
  if (&backend == im.backend) return;
  // The parameters and gradients come back to the host stores (where the old backend held the
  // newer copies), then live in the new backend's device memory if it has one.
  params();
  grads();
  im.dparams = DeviceArray<float>();
  im.dgrads = DeviceArray<float>();
  im.params_newer = im.grads_newer = Newer::none;
  if (backend.memory_space() == MemorySpace::device) {
    im.dparams = DeviceArray<float>(backend, static_cast<size_t>(params_.size()));
    im.dgrads = DeviceArray<float>(backend, static_cast<size_t>(grads_.size()));
    im.params_newer = im.grads_newer = Newer::host;  // uploaded by the first op that reads them
  }
  // The activations live in the old backend's memory: freed by it now, while it is alive.
  im.layers.clear();
  im.scratch = LayerActs{};
  for (ActBuffer<float>* b : {&im.x, &im.x_final, &im.h_final, &im.rstd_final, &im.logits, &im.scaled, &im.dlogits})
    *b = ActBuffer<float>{};
  im.saved = false;
  im.backend = &backend;
}

namespace {
// The host store brought up to date from the device copy (one download) where that is newer.
void refresh_host(ParamStore* host, const DeviceArray<float>& dev, Newer* newer, CrossKind kind) {
  if (*newer != Newer::device) return;
  dev.backend()->mem_copy(host->data().data(), dev.data(), dev.size() * sizeof(float), CopyDir::to_host, kind);
  *newer = Newer::none;
}
// The device copy brought up to date from the host store (one upload) where that is newer.
void refresh_device(const ParamStore& host, const DeviceArray<float>& dev, Newer* newer, CrossKind kind) {
  if (*newer != Newer::host) return;
  dev.backend()->mem_copy(dev.data(), host.data().data(), dev.size() * sizeof(float), CopyDir::to_device, kind);
  *newer = Newer::none;
}
}  // namespace

bool Model::resident() const { return impl_->dparams.data() != nullptr; }

ParamStore& Model::params() {
  Impl& im = *impl_;
  refresh_host(&params_, im.dparams, &im.params_newer, CrossKind::weights);
  if (resident()) im.params_newer = Newer::host;
  return params_;
}

const ParamStore& Model::params() const {
  refresh_host(&params_, impl_->dparams, &impl_->params_newer, CrossKind::weights);
  return params_;
}

ParamStore& Model::grads() {
  Impl& im = *impl_;
  refresh_host(&grads_, im.dgrads, &im.grads_newer, CrossKind::grads);
  if (resident()) im.grads_newer = Newer::host;
  return grads_;
}

const ParamStore& Model::grads() const {
  refresh_host(&grads_, impl_->dgrads, &impl_->grads_newer, CrossKind::grads);
  return grads_;
}

void Model::zero_grads() {
  Impl& im = *impl_;
  if (!resident()) {
    grads_.zero();
    return;
  }
  im.dgrads.backend()->mem_zero(im.dgrads.data(), im.dgrads.size() * sizeof(float));
  im.grads_newer = Newer::device;
}

ParamView<const float> Model::weights() const {
  Impl& im = *impl_;
  if (!resident()) return {params_, params_.data().data()};
  refresh_device(params_, im.dparams, &im.params_newer, CrossKind::weights);
  return {params_, im.dparams.data()};
}

float* Model::param_data() {
  Impl& im = *impl_;
  if (!resident()) return params_.data().data();
  refresh_device(params_, im.dparams, &im.params_newer, CrossKind::weights);
  im.params_newer = Newer::device;
  return im.dparams.data();
}

ParamView<float> Model::grad_sinks() {
  Impl& im = *impl_;
  if (!resident()) return {grads_, grads_.data().data()};
  refresh_device(grads_, im.dgrads, &im.grads_newer, CrossKind::grads);
  im.grads_newer = Newer::device;
  return {grads_, im.dgrads.data()};
}

const Backend& Model::backend() const { return backend_or_cpu(impl_->backend); }

namespace {
LinearNumerics pack_numerics(const NumericsProfile& p, LinearKind kind) {
  return site_linear_numerics(p, kind, NoiseKey{});
}
}  // namespace

const PackedSet& model_packed(Model::Impl* impl, const ModelConfig& cfg, const ParamView<const float>& params,
                              const NumericsProfile& p, ExpertRange owned) {
  const Backend& be = backend_or_cpu(impl->backend);
  for (const PackedSet& s : impl->packed)
    if (s.profile == p.name && s.backend == &be) return s;
  PackedSet s;
  s.profile = p.name;
  s.backend = &be;
  const LinearNumerics mm = pack_numerics(p, LinearKind::matmul);
  const int D = cfg.d_model, E = cfg.n_experts, F = cfg.mlp_width(), S = cfg.shared_expert_ff;
  s.layers.resize(cfg.n_layers);
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string pre = layer_prefix(l);
    PackedLayer& pl = s.layers[l];
    be.linear_pack_weight(&pl.wq, params.get(pre + "attn.wq"), D, D, mm);
    be.linear_pack_weight(&pl.wk, params.get(pre + "attn.wk"), D, D, mm);
    be.linear_pack_weight(&pl.wv, params.get(pre + "attn.wv"), D, D, mm);
    be.linear_pack_weight(&pl.wo, params.get(pre + "attn.wo"), D, D, mm);
    if (cfg.is_moe()) {
      be.linear_pack_weight(&pl.router, params.get(pre + "moe.router"), E, D,
                            pack_numerics(p, LinearKind::router));
      pl.expert_gate.resize(E); pl.expert_up.resize(E); pl.expert_down.resize(E);
      const float* wg = params.get(pre + "moe.w_gate");
      const float* wu = params.get(pre + "moe.w_up");
      const float* wd = params.get(pre + "moe.w_down");
      const size_t fd = static_cast<size_t>(F) * D;
      for (int e = owned.begin; e < owned.end; ++e) {  // other ranks' experts are not run here
        be.linear_pack_weight(&pl.expert_gate[e], wg + e * fd, F, D, mm);
        be.linear_pack_weight(&pl.expert_up[e], wu + e * fd, F, D, mm);
        be.linear_pack_weight(&pl.expert_down[e], wd + e * fd, D, F, mm);
      }
      if (S > 0) {
        be.linear_pack_weight(&pl.shared[0], params.get(pre + "moe.shared.w_gate"), S, D, mm);
        be.linear_pack_weight(&pl.shared[1], params.get(pre + "moe.shared.w_up"), S, D, mm);
        be.linear_pack_weight(&pl.shared[2], params.get(pre + "moe.shared.w_down"), D, S, mm);
      }
    } else {
      be.linear_pack_weight(&pl.mlp_gate, params.get(pre + "mlp.w_gate"), F, D, mm);
      be.linear_pack_weight(&pl.mlp_up, params.get(pre + "mlp.w_up"), F, D, mm);
      be.linear_pack_weight(&pl.mlp_down, params.get(pre + "mlp.w_down"), D, F, mm);
    }
  }
  be.linear_pack_weight(&s.lm_head, params.get("lm_head"), cfg.vocab_size, D,
                        pack_numerics(p, LinearKind::lm_head));
  impl->packed.push_back(std::move(s));
  return impl->packed.back();
}

FfnNumerics ffn_numerics(const NumericsProfile& p, int layer, Site gate, Site up, Site down,
                         uint64_t call) {
  FfnNumerics nm;
  nm.gate = site_linear_numerics(p, LinearKind::matmul, site_key(p, layer, gate, call));
  nm.up = site_linear_numerics(p, LinearKind::matmul, site_key(p, layer, up, call));
  nm.down = site_linear_numerics(p, LinearKind::matmul, site_key(p, layer, down, call));
  nm.activations = p.activations;
  return nm;
}

// See model_impl.h.
bool routes_resident(const Model& m, const Model::Impl& im, const NumericsProfile& p) {
  const ModelConfig& cfg = m.config();
  if (!cfg.is_moe() || m.backend().memory_space() != MemorySpace::device) return false;
  if ((im.dispatcher && im.dispatcher->ranks() != 1) || p.ep_layout.kind != EpLayoutKind::none) return false;
  const FfnNumerics nm = ffn_numerics(p, 0, Site::expert_gate, Site::expert_up, Site::expert_down, 0);
  return grouped_sized_on_device(nm.gate, cfg.d_model) && grouped_sized_on_device(nm.up, cfg.d_model) &&
         grouped_sized_on_device(nm.down, cfg.d_ff);
}

MoeCall moe_call(const ModelConfig& cfg, const NumericsProfile& p, int layer, uint64_t call,
                 RouterMode mode, const int32_t* replay_ids, const float* bias, int seq_len,
                 bool training, const Dispatcher* dispatcher, const RowSums* rows) {
  MoeCall c;
  c.router.cfg = &cfg;
  c.router.profile = &p;
  c.router.linear = site_linear_numerics(p, LinearKind::router, site_key(p, layer, Site::router, call));
  c.router.topk_key = site_key(p, layer, Site::topk, call);
  c.router.mode = mode;
  c.router.replay_ids = replay_ids;
  c.router.bias = bias;
  c.router.seq_len = seq_len;
  c.router.training = training;
  c.router.rows = rows;
  c.dispatcher = dispatcher;
  c.ep_layout = p.ep_layout;
  c.experts = ffn_numerics(p, layer, Site::expert_gate, Site::expert_up, Site::expert_down, call);
  c.shared = ffn_numerics(p, layer, Site::shared_gate, Site::shared_up, Site::shared_down, call);
  c.combine = site_reduce(p, p.combine_order, site_key(p, layer, Site::combine, call));
  return c;
}

void router_apply_control(RouterCall* rc, const RouterControl& ctl, int layer, int N, int E,
                          bool training) {
  if (!ctl.temperature.empty()) rc->temperature = ctl.temperature[static_cast<size_t>(layer)];
  rc->regularisers = ctl.regularisers_in_backward;
  rc->balance = ctl.load_balance;
  if (!training) return;
  const size_t off = static_cast<size_t>(layer) * N * E;
  if (ctl.kl_full_target) {
    rc->kl_full_target = ctl.kl_full_target + off;
    rc->kl_full_weight = ctl.kl_full_weight;
  }
  if (ctl.kl_topk_target) {
    rc->kl_topk_target = ctl.kl_topk_target + off;
    rc->kl_topk_weight = ctl.kl_topk_weight;
    rc->kl_topk_temperature = ctl.kl_topk_temperature;
  }
}

MoeWeights moe_weights(const ModelConfig& cfg, const ParamView<const float>& params, const PackedLayer& pl,
                       int layer) {
  const std::string pre = layer_prefix(layer);
  MoeWeights w;
  w.router = &pl.router;
  w.w_gate = pl.expert_gate.data();
  w.w_up = pl.expert_up.data();
  w.w_down = pl.expert_down.data();
  w.router_raw = params.get(pre + "moe.router");
  w.w_gate_raw = params.get(pre + "moe.w_gate");
  w.w_up_raw = params.get(pre + "moe.w_up");
  w.w_down_raw = params.get(pre + "moe.w_down");
  if (cfg.shared_expert_ff > 0) {
    w.shared = pl.shared;
    w.shared_gate_raw = params.get(pre + "moe.shared.w_gate");
    w.shared_up_raw = params.get(pre + "moe.shared.w_up");
    w.shared_down_raw = params.get(pre + "moe.shared.w_down");
  }
  return w;
}

}  // namespace moerl
