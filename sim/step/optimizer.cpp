// optimizer.cpp — see optimizer.h.
#include "sim/step/optimizer.h"

#include <cmath>
#include <stdexcept>


namespace moerl {

void OptimConfig::validate(const std::string& s) const {
  auto bad = [&](const char* key, double v, const char* allowed) {
    throw std::invalid_argument(s + "." + key + " = " + std::to_string(v) + ": " + allowed);
  };
  if (!(lr > 0.0f && lr < 1.0f)) bad("lr", lr, "must be in (0, 1)");
  if (!(beta1 >= 0.0f && beta1 < 1.0f)) bad("beta1", beta1, "must be in [0, 1)");
  if (!(beta2 >= 0.0f && beta2 < 1.0f)) bad("beta2", beta2, "must be in [0, 1)");
  if (!(eps > 0.0f)) bad("eps", eps, "must be > 0");
  if (!(weight_decay >= 0.0f)) bad("weight_decay", weight_decay, "must be >= 0");
  if (!(grad_clip >= 0.0f)) bad("grad_clip", grad_clip, "must be >= 0 (0 = off)");
  if (warmup_steps < 0) bad("warmup_steps", warmup_steps, "must be >= 0");
  if (!(min_lr_ratio >= 0.0f && min_lr_ratio <= 1.0f)) bad("min_lr_ratio", min_lr_ratio, "must be in [0, 1]");
}

float optim_lr_at(const OptimConfig& c, int64_t step, int64_t total) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * static_cast<float>(step + 1) / static_cast<float>(c.warmup_steps);
  const int64_t decay = std::max<int64_t>(total - c.warmup_steps, 1);
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / decay);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return static_cast<float>(c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine));
}

AdamW::AdamW(const OptimConfig& cfg, const ParamStore& layout) : cfg_(cfg) {
  for (const ParamInfo& p : layout.infos())
    tensors_.push_back({p.offset, p.size, p.shape.size() >= 2, false, p.name, 0, 0, p.size});
  m_.assign(static_cast<size_t>(layout.size()), 0.0f);
  v_.assign(static_cast<size_t>(layout.size()), 0.0f);
}

void AdamW::set_backend(const Backend& backend) {
  std::vector<float> m = this->m(), v = this->v();
  backend_ = &backend;
  dm_ = DeviceArray<float>();
  dv_ = DeviceArray<float>();
  if (backend.memory_space() == MemorySpace::device) {
    dm_ = DeviceArray<float>(backend, m.size());
    dv_ = DeviceArray<float>(backend, v.size());
    m_.clear();
    v_.clear();
  }
  set_m(m);
  set_v(v);
}

std::vector<float> AdamW::moment(const std::vector<float>& host, const DeviceArray<float>& dev) const {
  if (!dev.data()) return host;
  std::vector<float> x(dev.size());
  dev.backend()->mem_copy(x.data(), dev.data(), x.size() * sizeof(float), CopyDir::to_host, CrossKind::optimizer);
  return x;
}

void AdamW::set_moment(std::vector<float>* host, DeviceArray<float>* dev, const std::vector<float>& x) {
  if (!dev->data()) {
    *host = x;
    return;
  }
  if (x.size() != dev->size())
    throw std::invalid_argument("AdamW: moments of " + std::to_string(x.size()) + " values for " +
                                std::to_string(dev->size()) + " parameters");
  dev->backend()->mem_copy(dev->data(), x.data(), x.size() * sizeof(float), CopyDir::to_device, CrossKind::optimizer);
}

void AdamW::freeze(const std::string& pattern) {
  for (Tensor& t : tensors_)
    if (t.name.find(pattern) != std::string::npos) t.frozen = true;
}

void AdamW::set_parallel(int n_experts, ExpertRange owned, Collectives* ep, bool canonical) {
  ep_ = ep;
  ep_rank_ = ep ? ep->rank() : 0;
  pieces_ = canonical || (ep && ep->size() > 1);
  for (Tensor& t : tensors_) {
    bool expert = false;
    for (const char* suffix : {".moe.w_gate", ".moe.w_up", ".moe.w_down"}) {
      const std::string x(suffix);
      expert = expert || (t.name.size() >= x.size() && t.name.compare(t.name.size() - x.size(), x.size(), x) == 0);
    }
    if (!expert || n_experts <= 0) continue;
    const int64_t per = t.size / n_experts;
    t.experts = n_experts;
    t.own_begin = per * owned.begin;
    t.own_end = per * owned.end;
  }
}

// The square of the global norm, where the gradients are (the sum_squares op: the CPU's serial
// FP64 sum; a device's fixed tree, within its rounding): one FP64 crosses, no gradient.
double AdamW::grad_norm_sq(const float* g) const {
  const Backend& be = backend_or_cpu(backend_);
  std::vector<int64_t> begin, end;
  if (!pieces_) {  // the serial sum over the trained tensors in layout order, one accumulator
    for (const Tensor& t : tensors_)
      if (!t.frozen) {
        begin.push_back(t.offset);
        end.push_back(t.offset + t.size);
      }
    double sq = 0.0;
    if (!begin.empty()) be.sum_squares(&sq, g, begin.data(), end.data(), static_cast<int>(begin.size()), false);
    return sq;
  }
  // One partial per dense tensor (taken from EP rank 0, where every rank holds the same) and per
  // (expert tensor, expert) (from the owner); the others contribute exact zeros to the sum.
  std::vector<int> at;  // the partial each range fills
  int parts = 0;
  for (const Tensor& t : tensors_) {
    if (t.frozen) continue;
    const int n = t.experts > 0 ? t.experts : 1;
    const int64_t per = t.size / n;
    for (int i = 0; i < n; ++i, ++parts) {
      const int64_t b = per * i, e = per * (i + 1);
      const bool mine = t.experts > 0 ? (b >= t.own_begin && e <= t.own_end) : ep_rank_ == 0;
      if (!mine) continue;
      begin.push_back(t.offset + b);
      end.push_back(t.offset + e);
      at.push_back(parts);
    }
  }
  std::vector<double> part(static_cast<size_t>(parts), 0.0), mine(begin.size());
  if (!begin.empty()) be.sum_squares(mine.data(), g, begin.data(), end.data(), static_cast<int>(begin.size()), true);
  for (size_t r = 0; r < at.size(); ++r) part[static_cast<size_t>(at[r])] = mine[r];
  if (ep_ && ep_->size() > 1) ep_->allreduce_sum(part.data(), static_cast<int64_t>(part.size()));
  double sq = 0.0;
  for (double p : part) sq += p;
  return sq;
}

double AdamW::step(ParamStore* params, ParamStore* grads, float lr, int64_t step) {
  return this->step(params->data().data(), grads->data().data(), lr, step);
}

double adamw_step(AdamW& opt, Model& model, float lr, int64_t step) {
  return opt.step(model.param_data(), model.grad_sinks().data(), lr, step);
}

double AdamW::step(float* w, const float* g, float lr, int64_t step) {
  const double norm = std::sqrt(grad_norm_sq(g));
  const float clip = (cfg_.grad_clip > 0.0f && norm > cfg_.grad_clip && std::isfinite(norm))
                         ? static_cast<float>(cfg_.grad_clip / norm) : 1.0f;
  const double bc1 = 1.0 - std::pow(static_cast<double>(cfg_.beta1), static_cast<double>(step + 1));
  const double bc2 = 1.0 - std::pow(static_cast<double>(cfg_.beta2), static_cast<double>(step + 1));
  for (const Tensor& t : tensors_) {
    if (t.frozen) continue;
    const float decay = t.decay ? lr * cfg_.weight_decay : 0.0f;
    // element-wise (kernels/ref/adamw.cpp is the scalar form): vectorised, threads over blocks
    const int64_t j = t.offset + t.own_begin;
    float* m = dm_.data() ? dm_.data() : m_.data();
    float* v = dv_.data() ? dv_.data() : v_.data();
    backend_or_cpu(backend_).adamw_update(w + j, m + j, v + j, g + j,
                                          t.own_end - t.own_begin, clip, cfg_.beta1, cfg_.beta2,
                                          bc1, bc2, lr, decay, cfg_.eps);
  }
  return norm;
}

}  // namespace moerl
