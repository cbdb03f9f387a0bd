// optimizer.h — AdamW on the FP32 master weights, global-norm gradient clipping, and the
// learning-rate schedule (linear warm-up, then cosine decay to min_lr_ratio·lr).
// Weight decay applies to matrices only (not to norm weights); frozen tensors (e.g. the routers
// when rl.freeze_router is on) are left untouched, moments included.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "models/model.h"
#include "models/parallel.h"
#include "models/params.h"
#include "models/workspace.h"

namespace moerl {

struct OptimConfig {
  float lr = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_clip = 1.0f;     // max global L2 norm (0 = off)
  int warmup_steps = 0;
  float min_lr_ratio = 0.1f;  // cosine floor as a share of lr
  void validate(const std::string& section) const;
};

// lr at optimizer step `step` (0-based) of `total_steps`.
float optim_lr_at(const OptimConfig& c, int64_t step, int64_t total_steps);

class AdamW {
 public:
  AdamW(const OptimConfig& cfg, const ParamStore& layout);

  // Marks tensors whose name contains `pattern` as frozen (no update, no decay).
  void freeze(const std::string& pattern);

  // Expert parallelism: this rank updates only the slices [owned) of the routed-expert tensors
  // (layers.{i}.moe.w_gate/w_up/w_down, [E, ...]); other experts' slots and moments stay as they
  // are. The global gradient norm then covers every rank's experts (summed over `ep`). With
  // several ranks or `canonical` (deterministic mode) its square is the sum, in layout order, of
  // one partial per dense tensor and per (expert tensor, expert) — the same bits on any rank count.
  void set_parallel(int n_experts, ExpertRange owned, Collectives* ep, bool canonical);

  // Where the element-wise update runs (the model's backend; the CPU backend until set). On a
  // backend with a device (Backend::memory_space) the moments move into its memory and stay there
  // (the run's optimizer state is device-resident); m() / v() then download them, set_m / set_v
  // upload.
  void set_backend(const Backend& backend);

  // Clips grads in place to cfg.grad_clip (global norm), then one AdamW step at lr.
  // Returns the global gradient norm before clipping. step is 0-based (bias correction uses step+1).
  double step(ParamStore* params, ParamStore* grads, float lr, int64_t step);
  // The same on arrays in the parameters' layout where they live (w, g: host memory or the
  // backend's own; adamw_update and sum_squares take either): the clip's norm is reduced where
  // the gradients are (the CPU's serial FP64 sum on the CPU backend and the test device, so the
  // norm and the clip keep their bits), and one FP64 crosses.
  double step(float* w, const float* g, float lr, int64_t step);

  // The moments, [params().size()] each, in the parameters' layout (copies: a checkpoint's, a
  // bench round's restore).
  std::vector<float> m() const { return moment(m_, dm_); }
  std::vector<float> v() const { return moment(v_, dv_); }
  void set_m(const std::vector<float>& m) { set_moment(&m_, &dm_, m); }
  void set_v(const std::vector<float>& v) { set_moment(&v_, &dv_, v); }

 private:
  OptimConfig cfg_;
  struct Tensor {
    int64_t offset, size;
    bool decay, frozen;
    std::string name;
    int experts = 0;                   // E for routed-expert tensors, else 0
    int64_t own_begin = 0, own_end = 0;  // updated slice [own_begin, own_end) of the tensor
  };
  std::vector<Tensor> tensors_;
  Collectives* ep_ = nullptr;
  const Backend* backend_ = nullptr;
  bool pieces_ = false;  // norm from partial sums (set_parallel)
  int ep_rank_ = 0;
  double grad_norm_sq(const float* g) const;
  std::vector<float> moment(const std::vector<float>& host, const DeviceArray<float>& dev) const;
  void set_moment(std::vector<float>* host, DeviceArray<float>* dev, const std::vector<float>& x);
  // The moments: in host memory (m_, v_), or in the backend's device memory (dm_, dv_; m_, v_ empty).
  std::vector<float> m_, v_;
  DeviceArray<float> dm_, dv_;
};

// One AdamW step on the model's parameters where they live (Model::resident: the backend's device
// memory, for the run): the clip's norm and the update run there on the resident gradients, and
// no gradient crosses. On the CPU backend: opt.step(&params, &grads, ...).
double adamw_step(AdamW& opt, Model& model, float lr, int64_t step);

}  // namespace moerl
