// scenario.cpp — INI → typed structs. Boost.Program_options tokenises the INI text (sections become
// "section.key"); the key table below (one line per key, with its doc) converts each value to its
// field with a message that says what is allowed; each struct's validate() checks ranges.
#include "sim/scenario/scenario.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include <boost/program_options.hpp>

#include "sim/io/text_io.h"
#include "sim/rl/corrections.h"
#include "sim/rl/registry.h"

namespace po = boost::program_options;

namespace moerl {

namespace {

// Thrown by a field's setter: what values are allowed.
struct BadValue {
  std::string allowed;
};

struct Field {
  std::string key;
  std::string doc;
  std::function<void(const std::string&)> set;
  std::function<std::string()> get;
  // Whether the effective scenario writes the key (null: always). An algorithm's own key is
  // written only in runs of that algorithm (sim/rl/registry.h, AlgorithmParam).
  std::function<bool()> shown = nullptr;
};

std::string format_float(float v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back bit-exactly
  return std::string(buf, r.ptr);
}

// What a bad number key is told, per type of Fields::number.
template <class T>
struct NumberText;
template <>
struct NumberText<int> {
  static constexpr const char* out_of_range = "is outside the range of a 32-bit integer [-2147483648, 2147483647]";
  static constexpr const char* not_one = "must be an integer";
};
template <>
struct NumberText<uint64_t> {
  static constexpr const char* out_of_range =
      "is outside the range of a 64-bit unsigned integer [0, 18446744073709551615]";
  static constexpr const char* not_one = "must be an integer in [0, 2^64)";
};
template <>
struct NumberText<float> {
  static constexpr const char* out_of_range =
      "is outside the range of a 32-bit float (0, or a magnitude from 1.2e-38 to 3.4e+38)";
  static constexpr const char* not_one = "must be a number";
};

// The value of a number key: the whole text must read as a T (std::from_chars), in T's range.
template <class T>
T number_parse(const std::string& v) {
  T x{};
  auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  // from_chars says out of range both for overflow (1e39) and, for floats, underflow (1e-50)
  if (!v.empty() && r.ec == std::errc::result_out_of_range && r.ptr == v.data() + v.size())
    throw BadValue{NumberText<T>::out_of_range};
  if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size()) throw BadValue{NumberText<T>::not_one};
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(x)) throw BadValue{"must be a finite number"};
  return x;
}

bool boolean_parse(const std::string& v) {
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  throw BadValue{"must be true or false"};
}

// The key table of one scenario (or of one profile section).
class Fields {
 public:
  std::vector<Field> list;

  void custom(const std::string& key, const std::string& doc,
              std::function<void(const std::string&)> set, std::function<std::string()> get) {
    list.push_back(Field{key, doc, std::move(set), std::move(get)});
  }
  // An integer or float key: the whole value must read as a T (std::from_chars), in T's range.
  template <class T>
  void number(const std::string& key, T* p, const std::string& doc) {
    custom(key, doc, [p](const std::string& v) { *p = number_parse<T>(v); },
           [p] {
             if constexpr (std::is_floating_point_v<T>) return format_float(*p);
             else return std::to_string(*p);
           });
  }
  void boolean(const std::string& key, bool* p, const std::string& doc) {
    custom(key, doc, [p](const std::string& v) { *p = boolean_parse(v); },
           [p] { return std::string(*p ? "true" : "false"); });
  }
  void str(const std::string& key, std::string* p, const std::string& doc) {
    custom(key, doc,
           [p](const std::string& v) {
             if (v.empty()) throw BadValue{"must not be empty"};
             *p = v;
           },
           [p] { return *p; });
  }
  // A key whose value is one name of an enum's table (kernels/enum_names.h).
  template <class E, std::size_t N>
  void choice(const std::string& key, E* p, const EnumNames<E, N>& names, const std::string& doc) {
    custom(key, doc,
           [p, &names](const std::string& v) {
             if (!names.parse(v, p)) throw BadValue{names.must_be()};
           },
           [p, &names] { return std::string(names.name(*p)); });
  }
  void order(const std::string& key, ReduceOrder* p, const std::string& doc) {
    custom(key, doc,
           [p](const std::string& v) {
             if (!reduce_order_parse(v, p))
               throw BadValue{"must be fixed, reversed or split_k:N with N in 2..64"};
           },
           [p] { return reduce_order_name(*p); });
  }
};

// ---- the key tables: one line per key ----------------------------------------------------------

void bind_model(Fields& f, ModelConfig* m) {
  f.number("model.vocab_size", &m->vocab_size, "V: vocabulary size");
  f.number("model.d_model", &m->d_model, "D: residual width");
  f.number("model.n_layers", &m->n_layers, "L: transformer blocks");
  f.number("model.n_heads", &m->n_heads, "H: attention heads (D/H even, for RoPE)");
  f.number("model.n_experts", &m->n_experts, "E: routed experts per MoE layer; 0 = the dense twin");
  f.number("model.top_k", &m->top_k, "K: experts per token (dense twin: MLP width top_k*d_ff)");
  f.number("model.d_ff", &m->d_ff, "F: SwiGLU width of one expert");
  f.number("model.shared_expert_ff", &m->shared_expert_ff, "width of an always-on shared expert (0 = none)");
  f.number("model.max_seq_len", &m->max_seq_len, "longest sequence (KV cache, RoPE table)");
  f.number("model.rope_theta", &m->rope_theta, "RoPE base: theta_j = rope_theta^(-2j/d_head)");
  f.number("model.norm_eps", &m->norm_eps, "RMSNorm epsilon");
  f.boolean("model.norm_topk_prob", &m->norm_topk_prob, "renormalise the k gate weights to sum to 1");
  f.choice("model.scoring", &m->scoring, kScoringNames, "router scoring: softmax | sigmoid");
  f.boolean("model.expert_bias", &m->expert_bias, "aux-loss-free expert selection bias (DeepSeek-V3)");
  f.number("model.bias_update_rate", &m->bias_update_rate, "u in b_e += u*sign(mean load - load_e)");
  f.choice("model.load_balance", &m->load_balance, kLoadBalanceNames,
           "load-balancing loss: none | aux_loss | seq_aux_loss");
  f.number("model.aux_loss_coef", &m->aux_loss_coef, "coefficient of the load-balancing loss");
  f.number("model.z_loss_coef", &m->z_loss_coef, "coefficient of the router z-loss (0 = off)");
  f.number("model.init_std", &m->init_std, "weights ~ N(0, init_std^2); norms start at 1");
}

void bind_run(Fields& f, RunConfig* r) {
  f.number("run.seed", &r->seed, "root seed of every named stream (init, data, sampling)");
  f.boolean("run.deterministic", &r->deterministic,
            "sums over the batch in canonical chunks: bit-identical results on any rank count dividing run.reduce_chunks");
  f.number("run.reduce_chunks", &r->reduce_chunks, "C: chunks of the batch in deterministic mode (a multiple of every data-parallel size used)");
  f.choice("run.backend", &r->backend, kBackendNames, "where the model's ops run: cpu | cuda (one GPU per rank)");
}

void bind_engines(Fields& f, EnginesConfig* e) {
  f.str("engines.rollout", &e->rollout, "numerics profile of the rollout engine");
  f.str("engines.train", &e->train, "numerics profile of the train engine");
}

void bind_audit(Fields& f, AuditConfig* a) {
  f.number("audit.prompts", &a->prompts, "sequences sampled when no tokens are given");
  f.number("audit.prompt_len", &a->prompt_len, "uniform random prompt tokens per sequence");
  f.number("audit.response_len", &a->response_len, "tokens sampled per sequence under profile A");
  f.number("audit.temperature", &a->temperature, "sampling temperature (0 = greedy)");
}

void bind_bench(Fields& f, BenchConfig* b) {
  f.number("bench.sequences", &b->sequences, "sequences per batch");
  f.number("bench.seq_len", &b->seq_len, "sequence length of the timed training step");
  f.number("bench.prompt_len", &b->prompt_len, "prompt length of the timed generation (prefill)");
  f.number("bench.decode_steps", &b->decode_steps, "tokens generated per sequence (KV-cache decode)");
}

void bind_optim(Fields& f, const std::string& sec, OptimConfig* o) {
  f.number(sec + ".lr", &o->lr, "peak learning rate");
  f.number(sec + ".beta1", &o->beta1, "AdamW beta1");
  f.number(sec + ".beta2", &o->beta2, "AdamW beta2");
  f.number(sec + ".eps", &o->eps, "AdamW epsilon");
  f.number(sec + ".weight_decay", &o->weight_decay, "decoupled weight decay (matrices only)");
  f.number(sec + ".grad_clip", &o->grad_clip, "max global gradient L2 norm (0 = off)");
  f.number(sec + ".warmup_steps", &o->warmup_steps, "linear warm-up steps, then cosine decay");
  f.number(sec + ".min_lr_ratio", &o->min_lr_ratio, "cosine floor as a share of lr");
}

void bind_task(Fields& f, TaskConfig* t) {
  f.str("task.name", &t->name, task_key_doc());
  f.number("task.length", &t->length, "values per prompt (modadd: digits per operand)");
  f.number("task.base", &t->base, "value range / digit base");
  f.boolean("task.partial_credit", &t->partial_credit, "reward = share of correct answer positions (EOS tasks: over the longer of answer and response)");
  f.choice("task.reward_on", &t->reward_on, kRewardOnNames,
           "what the reward compares: response (working and answer) | final_answer (bubble: the last pass, the working ungraded; tasks without working: the whole response)");
  f.boolean("task.eos", &t->eos, "sort/reverse/modadd: the answer ends with an EOS token and generation ends at EOS (bubble always does)");
}

void bind_sft(Fields& f, SftConfig* s) {
  f.number("sft.steps", &s->steps, "supervised warm-up steps making the base policy (0 = fresh init)");
  f.number("sft.batch", &s->batch, "examples per warm-up step");
  bind_optim(f, "sft", &s->optim);
}

// [rl]: the keys algorithms register for themselves (AlgorithmParam), in the registry's order;
// the effective scenario writes a key only in runs of an algorithm that reads it.
void bind_rl_algorithm_params(Fields& f, RlConfig* r) {
  std::vector<std::string> bound;
  for (const AlgorithmInfo& a : algorithm_registry())
    for (const AlgorithmParam& p : a.params) {
      const std::string key = p.key;
      if (std::find(bound.begin(), bound.end(), key) != bound.end()) continue;
      bound.push_back(key);
      const bool boolean = p.boolean;
      f.custom("rl." + key, std::string(p.doc) + " (rl.algorithm = " + algorithm_param_readers(key) + ")",
               [r, key, boolean](const std::string& v) {
                 r->loss.params[key] = boolean ? (boolean_parse(v) ? 1.0f : 0.0f) : number_parse<float>(v);
               },
               [r, key, boolean] {
                 const float v = r->loss.param(key);
                 return boolean ? std::string(v != 0.0f ? "true" : "false") : format_float(v);
               });
      f.list.back().shown = [r, key] { return algorithm_reads_param(r->loss.algorithm, key); };
    }
}

// [rl]: the algorithm and its loss.
void bind_rl_loss(Fields& f, RlConfig* r) {
  f.str("rl.algorithm", &r->loss.algorithm, algorithm_key_doc());
  f.number("rl.clip_low", &r->loss.clip_low, algorithm_clip_doc(false));
  f.number("rl.clip_high", &r->loss.clip_high, algorithm_clip_doc(true));
  f.number("rl.dual_clip", &r->loss.dual_clip, "dual-clip constant c for A < 0 (0 = off)");
  f.choice("rl.aggregation", &r->loss.aggregation, kAggregationNames,
           "token-mean | seq-mean-token-mean | seq-mean-token-sum (gspo forces seq-mean-token-mean)");
  f.custom("rl.correction", rl::correction_key_doc(),
           [r](const std::string& v) {
             if (!correction_parse(v, &r->loss.correction) || rl::correction_forced_by(r->loss.correction))
               throw BadValue{rl::correction_must_be()};
           },
           [r] {
             const bool forced = rl::correction_forced_by(r->loss.correction) != nullptr;
             return std::string(correction_name(forced ? Correction::none : r->loss.correction));
           });
  f.number("rl.correction_cap", &r->loss.correction_cap, "C: tis / tis+seq-mis truncate rho_t at C, mis masks rho_t > C, seq-tis / seq-tis-geo truncate the sequence ratio at C");
  f.number("rl.correction_cap_low", &r->loss.correction_cap_low, "C_low: tis / tis+seq-mis raise rho_t below C_low to C_low (0 = no lower truncation; Miles: 0.5)");
  f.number("rl.seq_mask_low", &r->loss.seq_mask_low, "seq-mis / tis+seq-mis: keep a sequence whose geometric-mean rho is >= this ...");
  f.number("rl.seq_mask_high", &r->loss.seq_mask_high, "... and <= this (slime/Miles: [0.99, 1.001])");
  f.number("rl.seq_k3_max", &r->loss.seq_k3_max, "seq-max-k3: drop a sequence whose max token k3 = rho - 1 - log rho exceeds this");
  f.number("rl.icepop_low", &r->loss.icepop_low, "IcePop band lower bound alpha on pi_old/pi_rollout");
  f.number("rl.icepop_high", &r->loss.icepop_high, "IcePop band upper bound beta");
  f.number("rl.rspo_floor", &r->loss.rspo_floor, "RSPO floor gamma_min of the router-shift weight");
  f.number("rl.kl_coef", &r->loss.kl_coef, "coefficient of the k3 KL to the base policy (0 = off)");
  f.choice("rl.old_logprobs", &r->old_logprobs, kOldLogprobsNames,
           "pi_old: recompute (train engine) | rollout (bypass mode)");
  f.choice("rl.routing_replay", &r->routing_replay, kRoutingReplayNames,
           "train-engine routing: none | old (R2) | rollout (R3)");
  bind_rl_algorithm_params(f, r);
}

// [rl]: the batch of a step, sampling, responses' lengths and advantages.
void bind_rl_batch(Fields& f, RlConfig* r) {
  f.number("rl.steps", &r->steps, "RL steps (one rollout batch each)");
  f.number("rl.prompts_per_step", &r->prompts_per_step, "prompts per step");
  f.number("rl.group_size", &r->group_size, "samples per prompt (GRPO group)");
  f.number("rl.minibatches", &r->minibatches, "optimizer steps per rollout batch (later ones off-policy)");
  f.number("rl.temperature", &r->sampling.temperature, "sampling temperature (0 = greedy)");
  f.number("rl.max_response_len", &r->max_response_len, "EOS tasks: response length limit in tokens, EOS included (0 = the task's longest answer); a response reaching it without EOS is truncated");
  f.number("rl.truncated_reward", &r->truncated_reward, "reward of a truncated response");
  f.number("rl.overlong_buffer", &r->overlong_buffer, "DAPO soft overlong penalty over the last N tokens before rl.max_response_len (0 = off)");
  f.number("rl.overlong_penalty", &r->overlong_penalty, "the overlong penalty falls linearly from 0 to -this across the buffer");
  f.boolean("rl.mask_truncated", &r->mask_truncated, "leave truncated responses out of the loss (DAPO overlong filtering)");
  f.boolean("rl.filter_groups", &r->filter_groups, "DAPO dynamic sampling: groups whose rewards are all equal leave the loss (the batch shrinks, no refill)");
  f.number("rl.top_p", &r->sampling.top_p, "nucleus sampling mass");
  f.boolean("rl.adv_std_norm", &r->adv_std_norm, "divide advantages by the group std (false = Dr.GRPO)");
  f.number("rl.adv_eps", &r->adv_eps, "epsilon added to the group std");
  f.boolean("rl.freeze_router", &r->freeze_router, "leave router weights untouched");
  f.boolean("rl.aux_loss", &r->aux_loss, "keep the model's load-balancing loss (model.load_balance) on during RL (false: off)");
  f.boolean("rl.bias_update", &r->bias_update, "keep updating the expert bias (model.expert_bias) during RL (false: frozen at the base's)");
  f.number("rl.rollout_staleness", &r->rollout_staleness, "rollouts use weights this many optimizer steps old (async pipeline)");
}

// [rl]: the router-side stabilisers (docs/stabilisers.md).
void bind_rl_stabilisers(Fields& f, RlConfig* r) {
  f.number("rl.router_kl_coef", &r->router_kl_coef, "router KL replay buffer: weight of KL(router || pi_old's detached router) (0 = off; 0.1 suggested)");
  f.number("rl.calib_coef", &r->calib_coef, "routing calibration: lambda of KL(train router || inference router) over the top-k (0 = off)");
  f.number("rl.calib_every", &r->calib_every, "routing calibration on every N-th step");
  f.choice("rl.calib_schedule", &r->calib_schedule, kRampScheduleNames,
           "lambda over training: constant | linear | sigmoid");
  f.number("rl.calib_temperature", &r->calib_temperature, "temperature T of the calibration's top-k distributions");
  f.boolean("rl.grad_surgery", &r->grad_surgery, "project regulariser gradients that conflict with the policy gradient off the routers");
  f.number("rl.router_temp_every", &r->router_temp_every, "router temperature control every N steps (0 = off)");
  f.number("rl.router_temp_min_util", &r->router_temp.min_utilisation, "temperature x router_temp_down when fewer than this share of experts get tokens");
  f.number("rl.router_temp_monopoly", &r->router_temp.monopoly, "temperature x router_temp_up when one expert takes more than this share");
  f.number("rl.router_temp_down", &r->router_temp.down, "factor of the under-utilisation rule");
  f.number("rl.router_temp_up", &r->router_temp.up, "factor of the monopoly rule");
  f.boolean("rl.shared_prefix_routing", &r->shared_prefix_routing, "a prompt's routing is computed once per group and reused by its samples");
}

// [rl]: evaluation, checkpoints and the collapse rule.
void bind_rl_schedule(Fields& f, RlConfig* r) {
  f.number("rl.eval_every", &r->eval_every, "steps between greedy evaluations (0 = at the end only)");
  f.number("rl.eval_prompts", &r->eval_prompts, "held-out prompts per evaluation");
  f.str("rl.eval_profile", &r->eval_profile, "numerics profile of evaluation");
  f.number("rl.drift_probes", &r->drift_probes, "held-out sequences whose routing is compared with the base policy's at each evaluation (router_drift; 0 = off)");
  f.number("rl.checkpoint_every", &r->checkpoint_every, "steps between checkpoints (0 = at the end)");
  f.number("rl.collapse_frac", &r->collapse_frac, "collapse: reward moving average below this share of its running peak ...");
  f.number("rl.collapse_window", &r->collapse_window, "... the moving average's window in steps ...");
  f.number("rl.collapse_patience", &r->collapse_patience, "... for this many steps in a row (or any NaN/inf)");
  f.boolean("rl.continue_after_collapse", &r->continue_after_collapse, "keep training after a collapse");
}

// The [rl] keys, in the order the effective scenario writes them.
void bind_rl(Fields& f, RlConfig* r) {
  bind_rl_loss(f, r);
  bind_rl_batch(f, r);
  bind_rl_stabilisers(f, r);
  bind_rl_schedule(f, r);
}

// Keys of a [profile.NAME] section other than `base`; prefix = "profile.NAME.".
void bind_profile(Fields& f, const std::string& x, NumericsProfile* p) {
  f.choice(x + "matmul", &p->matmul, kFormatNames, "operand format of attention projections, experts, dense MLP");
  f.choice(x + "act_scaling", &p->act_scaling, kScalingNames, "scaling of quantised activation operands");
  f.choice(x + "weight_scaling", &p->weight_scaling, kScalingNames, "scaling of quantised weight operands");
  f.number(x + "scale_block", &p->scale_block, "B of the 1xB / BxB scaling blocks");
  f.number(x + "accum_bits", &p->accum_bits, "fraction bits of the limited accumulator (0 = FP32)");
  f.number(x + "promote_every", &p->promote_every, "products summed before promotion to FP32");
  f.choice(x + "router", &p->router, kFormatNames, "operand format of the router GEMM");
  f.choice(x + "attention", &p->attention, kFormatNames, "operand format of QK^T and P*V");
  f.choice(x + "lm_head", &p->lm_head, kFormatNames, "operand format of the LM head");
  f.choice(x + "activations", &p->activations, kFormatNames, "storage format of every op's output");
  f.choice(x + "router_logits", &p->router_logits, kFormatNames, "storage format of router logits before top-k");
  f.number(x + "router_noise", &p->router_noise,
        "sigma of artificial Gaussian noise on router logits before top-k (a mismatch dial; 0 = off)");
  f.order(x + "gemm_order", &p->gemm_order, "reduction order of linear layers");
  f.order(x + "norm_order", &p->norm_order, "reduction order of the RMSNorm sum of squares");
  f.order(x + "attn_order", &p->attn_order, "reduction order inside attention");
  f.order(x + "combine_order", &p->combine_order, "order of the MoE combine of k expert outputs");
  f.boolean(x + "batch_invariant", &p->batch_invariant, "reductions independent of the batch size");
  f.boolean(x + "atomics", &p->atomics,
            "cuda backend: split-K partials of linear layers combined by atomicAdd (needs gemm_order = split_k:N)");
  f.choice(x + "tie_break", &p->tie_break, kTieBreakNames, "top-k tie-breaking: lowest | highest | random");
  f.custom(x + "ep_layout", "emulated expert-parallel layout, the base order of the MoE combine: none | contiguous | strided:N",
           [p](const std::string& v) {
             if (!ep_layout_parse(v, &p->ep_layout))
               throw BadValue{"must be none, contiguous or strided:N with N in 2..4096"};
           },
           [p] { return ep_layout_name(p->ep_layout); });
  f.number(x + "seed", &p->seed, "seed of this profile's noise streams");
}

void bind_precursors(Fields& f, PrecursorConfig* p) {
  f.number("precursors.window", &p->window, "trailing window W (steps) whose median m every precursor flag compares with");
  f.number("precursors.k3_rise", &p->k3_rise, "pre_k3_rise: rc_k3 > k3_rise * m");
  f.number("precursors.grad_norm_spike", &p->grad_norm_spike, "pre_grad_norm_spike: grad_norm > grad_norm_spike * m");
  f.number("precursors.grad_norm_drop", &p->grad_norm_drop, "pre_grad_norm_drop: grad_norm < grad_norm_drop * m");
  f.number("precursors.entropy_spike", &p->entropy_spike, "pre_entropy_spike: entropy > entropy_spike * m");
  f.number("precursors.clip_burst", &p->clip_burst, "pre_clip_burst: clip_frac > max(clip_burst * m, m + clip_burst_floor)");
  f.number("precursors.clip_burst_floor", &p->clip_burst_floor, "absolute part of the clip-burst rule");
  f.number("precursors.ess_drop", &p->ess_drop, "pre_ess_drop: rc_ess_token < ess_drop * m");
  f.number("precursors.length_surge", &p->length_surge, "pre_length_surge: response_length_mean > length_surge * m");
}

void bind_fixed(Fields& f, Scenario* s) {
  bind_model(f, &s->model);
  bind_run(f, &s->run);
  bind_engines(f, &s->engines);
  bind_audit(f, &s->audit);
  bind_bench(f, &s->bench);
  bind_rl(f, &s->rl);
  bind_precursors(f, &s->rl.precursors);
  bind_task(f, &s->task);
  bind_optim(f, "optim", &s->optim);
  bind_sft(f, &s->sft);
}

const char* kSections = "model, run, engines, audit, bench, rl, precursors, task, optim, sft, profile.NAME";

// ---- helpers -----------------------------------------------------------------------------------

void check_min(const char* key, int v, int lo) {
  if (v < lo)
    throw std::invalid_argument(std::string(key) + " = " + std::to_string(v) + ": must be >= " +
                                std::to_string(lo));
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// " (did you mean X?)" for the closest known key within a small edit distance, else "".
std::string did_you_mean(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const std::string& k : known) {
    const size_t d = edit_distance(key, k);
    if (d < best_d) { best_d = d; best = k; }
  }
  if (best_d <= std::max<size_t>(2, key.size() / 5)) return " (did you mean " + best + "?)";
  return "";
}

struct RawValue {
  std::string value;
  std::string origin;  // the file, or "--set"
};

bool valid_profile_name(const std::string& n) {
  if (n.empty()) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

}  // namespace

// ---- validation ---------------------------------------------------------------------------------

void RunConfig::validate() const { check_min("run.reduce_chunks", reduce_chunks, 1); }

void AuditConfig::validate() const {
  check_min("audit.prompts", prompts, 1);
  check_min("audit.prompt_len", prompt_len, 1);
  check_min("audit.response_len", response_len, 1);
  if (!(temperature >= 0.0f))
    throw std::invalid_argument("audit.temperature = " + format_float(temperature) +
                                ": must be >= 0 (0 = greedy)");
}

void BenchConfig::validate() const {
  check_min("bench.sequences", sequences, 1);
  check_min("bench.seq_len", seq_len, 2);
  check_min("bench.prompt_len", prompt_len, 1);
  check_min("bench.decode_steps", decode_steps, 1);
}

// ---- parsing ------------------------------------------------------------------------------------

namespace {

using RawKeys = std::map<std::string, RawValue>;                      // key → value and origin
using ProfileKeys = std::map<std::string, std::map<std::string, RawValue>>;  // NAME → field → value

// Phase 1: the file's keys, then the --set overrides over them. Program_options reads sections
// and keys; every key is "unregistered" here because the key table, not Program_options, knows
// the types.
RawKeys scenario_tokenise(const std::string& text, const std::string& source, const std::vector<std::string>& overrides) {
  std::vector<std::pair<std::string, RawValue>> entries;
  try {
    std::istringstream in(text_strip_bom(text));  // a leading byte-order mark is not part of the text
    po::options_description none;
    const po::parsed_options parsed = po::parse_config_file(in, none, true);
    for (const po::option& o : parsed.options) {
      const std::string value = o.value.empty() ? "" : trim(o.value.front());
      entries.push_back({o.string_key, RawValue{value, source}});
    }
  } catch (const po::error& e) {
    throw std::invalid_argument(source + ": " + text_visible(e.what()));
  }
  RawKeys raw;
  for (auto& [key, v] : entries) {
    if (raw.count(key))
      throw std::invalid_argument(source + ": key '" + text_shown(key) + "' is given more than once");
    raw[key] = v;
  }
  std::map<std::string, std::string> set_before;  // key → the --set that gave it
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("--set " + text_shown(o) + ": expected section.key=value");
    const std::string key = trim(o.substr(0, eq));
    if (key.find('.') == std::string::npos)
      throw std::invalid_argument("--set " + text_shown(o) + ": expected section.key=value (key '" +
                                  text_shown(key) + "' has no section)");
    // as in a file, a key is given once: which of two values was meant cannot be told
    if (set_before.count(key))
      throw std::invalid_argument("--set " + text_shown(o) + ": key '" + text_shown(key) +
                                  "' is given more than once (also --set " + text_shown(set_before[key]) + ")");
    set_before[key] = o;
    raw[key] = RawValue{trim(o.substr(eq + 1)), "--set"};
  }
  return raw;
}

// " (did you mean rl.steps?)": the nearest key by spelling, else the keys of other sections with
// the same field name (model.steps → rl.steps or sft.steps).
std::string did_you_mean_key(const std::string& key, const std::vector<std::string>& known) {
  const std::string near = did_you_mean(key, known);
  const size_t dot = key.find('.');
  if (!near.empty() || dot == std::string::npos) return near;
  std::vector<std::string> same_field;
  for (const std::string& k : known)
    if (k.size() > key.size() - dot && k.compare(k.size() - (key.size() - dot), std::string::npos, key, dot) == 0)
      same_field.push_back(k);
  return same_field.empty() ? "" : " (did you mean " + allowed_list(same_field) + "?)";
}

// The message of a key no table knows: outside any section, in an unknown section, or unknown in
// its section.
std::string unknown_key_message(const std::string& key, const RawValue& v, const std::vector<std::string>& known) {
  const size_t dot = key.find('.');
  if (dot == std::string::npos)
    return v.origin + ": key '" + text_shown(key) + "' outside any section" + did_you_mean_key(key, known) +
           "; sections: " + kSections;
  const std::string section = key.substr(0, dot);
  if (section == "sweep")
    return v.origin + ": [sweep] (key '" + text_shown(key) + "'): this is a grid: use moerl sweep " + v.origin +
           " (moerl run takes a scenario without a [sweep] section; docs/sweeps.md)";
  bool known_section = false;
  for (const std::string& k : known) known_section = known_section || k.compare(0, dot + 1, key, 0, dot + 1) == 0;
  if (!known_section)
    return v.origin + ": unknown section [" + text_shown(section) + "] (key '" + text_shown(key) + "')" +
           did_you_mean_key(key, known) + "; sections: " + kSections;
  return v.origin + ": unknown key '" + text_shown(key) + "'" + did_you_mean_key(key, known);
}

// Sets `key` through its field; a bad value names the origin, the key, the value and what is allowed.
void field_set(const Field& f, const std::string& key, const RawValue& v) {
  try {
    f.set(v.value);
  } catch (const BadValue& b) {
    throw std::invalid_argument(v.origin + ": " + key + " = " + text_shown(v.value) + ": " + b.allowed);
  }
}

// Phase 2: the fixed sections through the key table; profile keys are set aside for phase 3.
ProfileKeys scenario_apply_fixed(const RawKeys& raw, const Fields& fixed) {
  std::vector<std::string> fixed_keys;
  for (const Field& f : fixed.list) fixed_keys.push_back(f.key);
  ProfileKeys profile_raw;
  for (const auto& [key, v] : raw) {
    if (key.rfind("profile.", 0) == 0) {
      const std::string rest = key.substr(8);
      const size_t dot = rest.rfind('.');
      if (dot == std::string::npos || !valid_profile_name(rest.substr(0, dot)))
        throw std::invalid_argument(
            v.origin + ": key '" + text_shown(key) +
            "': profile keys are profile.NAME.field with NAME of letters, digits, '-' and '_'");
      profile_raw[rest.substr(0, dot)][rest.substr(dot + 1)] = v;
      continue;
    }
    auto it = std::find_if(fixed.list.begin(), fixed.list.end(), [&](const Field& f) { return f.key == key; });
    if (it == fixed.list.end()) throw std::invalid_argument(unknown_key_message(key, v, fixed_keys));
    field_set(*it, key, v);
  }
  return profile_raw;
}

// Phase 2b: the run's algorithm's scenario keys (AlgorithmInfo::defaults and ::forced,
// sim/rl/registry.h), its loss_of row's first: a default where the scenario gives no value; a
// forced value always, and a scenario that gives another one is refused.
void scenario_apply_algorithm(const RawKeys& raw, const Fields& fixed, const std::string& algorithm) {
  const AlgorithmInfo* a = algorithm_find(algorithm);
  if (!a) return;  // validation names the bad value
  std::vector<const AlgorithmInfo*> rows;
  if (a->loss_of) rows.push_back(&algorithm_loss_row(*a));
  rows.push_back(a);
  const std::string origin = "rl.algorithm = " + algorithm;
  auto field_of = [&](const std::string& entry, std::string* key, std::string* value) -> const Field& {
    const size_t eq = entry.find('=');
    *key = trim(entry.substr(0, eq));
    *value = eq == std::string::npos ? "" : trim(entry.substr(eq + 1));
    for (const Field& f : fixed.list)
      if (f.key == *key) return f;
    throw std::logic_error(origin + ": its row's key '" + entry + "' is no scenario key");
  };
  for (const AlgorithmInfo* row : rows) {
    std::string key, value;
    for (const char* entry : row->defaults) {
      const Field& f = field_of(entry, &key, &value);
      if (!raw.count(key)) field_set(f, key, RawValue{value, origin});
    }
    for (const char* entry : row->forced) {
      const Field& f = field_of(entry, &key, &value);
      field_set(f, key, RawValue{value, origin});
      const std::string want = f.get();
      const auto given = raw.find(key);
      if (given == raw.end()) continue;
      field_set(f, key, given->second);
      const std::string got = f.get();
      field_set(f, key, RawValue{value, origin});
      if (got != want)
        throw std::invalid_argument(given->second.origin + ": " + key + " = " + text_shown(given->second.value) + ": " +
                                    origin + " means " + key + " = " + want);
    }
  }
}

// Phase 3: one user profile: its base built-in, then its section's fields, validated.
NumericsProfile scenario_profile(const std::string& name, const std::map<std::string, RawValue>& fields_raw,
                                 const std::string& source) {
  std::string base = "fp32-ref";
  auto b = fields_raw.find("base");
  if (b != fields_raw.end()) base = b->second.value;
  NumericsProfile p;
  if (!profile_builtin(base, &p))
    throw std::invalid_argument((b != fields_raw.end() ? b->second.origin : source) + ": profile." + name +
                                ".base = " + text_visible(base) + ": must be a built-in profile (" +
                                profile_builtin_names() + ")");
  p.name = name;
  Fields pf;
  const std::string prefix = "profile." + name + ".";
  bind_profile(pf, prefix, &p);
  std::vector<std::string> known = {prefix + "base"};
  for (const Field& f : pf.list) known.push_back(f.key);
  for (const auto& [field, v] : fields_raw) {
    if (field == "base") continue;
    const std::string key = prefix + field;
    auto it = std::find_if(pf.list.begin(), pf.list.end(), [&](const Field& f) { return f.key == key; });
    if (it == pf.list.end())
      throw std::invalid_argument(v.origin + ": unknown key '" + text_shown(key) + "'" + did_you_mean(key, known));
    field_set(*it, key, v);
  }
  try {
    p.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source + ": " + text_visible(e.what()));
  }
  return p;
}

// The task must fit the model: its token ids in the vocabulary, its sequences in max_seq_len.
void scenario_check_task_fits(const Scenario& s) {
  const auto task = task_create(s.task);
  if (task->vocab_size() > s.model.vocab_size)
    throw std::invalid_argument("task." + s.task.name + " with task.base = " + std::to_string(s.task.base) +
                                " uses " + std::to_string(task->vocab_size()) +
                                " token ids: needs model.vocab_size >= " + std::to_string(task->vocab_size()) +
                                " (is " + std::to_string(s.model.vocab_size) + ")");
  // 64-bit: a limit near INT_MAX must not wrap below max_seq_len
  const int64_t T = static_cast<int64_t>(task->prompt_len()) + rl_response_limit(s.rl, *task);
  if (T > s.model.max_seq_len)
    throw std::invalid_argument("task." + s.task.name + " with task.length = " + std::to_string(s.task.length) +
                                (task->ends_at_eos() ? " and rl.max_response_len = " + std::to_string(s.rl.max_response_len) : std::string()) +
                                " makes sequences of " + (task->ends_at_eos() ? "up to " : "") + std::to_string(T) +
                                " tokens: needs model.max_seq_len >= " + std::to_string(T) +
                                " (is " + std::to_string(s.model.max_seq_len) + ")");
  // The base policy's warm-up (sft) and the drift probe hold whole answers, whatever the RL
  // response limit: a limit below the answer length does not shorten them.
  const int64_t T_sft = static_cast<int64_t>(task->prompt_len()) + task->max_answer_len();
  if (T_sft > s.model.max_seq_len)
    throw std::invalid_argument("task." + s.task.name + " with task.length = " + std::to_string(s.task.length) +
                                " has answers of up to " + std::to_string(task->max_answer_len()) +
                                " tokens, so the base policy's warm-up (sft) trains on sequences of " +
                                std::to_string(T_sft) + " tokens" +
                                (task->ends_at_eos() && s.rl.max_response_len > 0 &&
                                         s.rl.max_response_len < task->max_answer_len()
                                     ? " (rl.max_response_len = " + std::to_string(s.rl.max_response_len) +
                                           " limits only the RL responses)"
                                     : std::string()) +
                                ": needs model.max_seq_len >= " + std::to_string(T_sft) + " (is " +
                                std::to_string(s.model.max_seq_len) + ")");
}

// The profiles the scenario names must exist: rl.eval_profile, engines.rollout, engines.train.
void scenario_check_profiles(const Scenario& s) {
  if (!s.has_profile(s.rl.eval_profile))
    throw std::invalid_argument("rl.eval_profile = " + s.rl.eval_profile + ": unknown profile (built-in: " +
                                profile_builtin_names() + ")");
  for (const auto& [key, name] : {std::pair<const char*, const std::string*>{"engines.rollout", &s.engines.rollout},
                                  {"engines.train", &s.engines.train}}) {
    if (s.has_profile(*name)) continue;
    std::string user;
    for (const NumericsProfile& p : s.profiles) user += ", " + p.name;
    throw std::invalid_argument(std::string(key) + " = " + *name + ": unknown profile (built-in: " +
                                profile_builtin_names() + (user.empty() ? "" : "; user:" + user.substr(1)) + ")");
  }
}

// Phase 5: the effective text: every key, canonical form.
std::string scenario_effective_text(const Fields& fixed, const std::vector<NumericsProfile>& profiles,
                                    const std::string& source) {
  std::string eff = "# effective scenario (source: " + source + ")\n";
  for (const Field& f : fixed.list)
    if (!f.shown || f.shown()) eff += f.key + " = " + f.get() + "\n";
  for (const NumericsProfile& p : profiles) {
    NumericsProfile copy = p;
    Fields pf;
    bind_profile(pf, "profile." + p.name + ".", &copy);
    eff += "profile." + p.name + ".base = fp32-ref\n";
    for (const Field& f : pf.list) eff += f.key + " = " + f.get() + "\n";
  }
  return eff;
}

// Phase 4: validate once, whole structs and cross-references; the message blames where the
// value came from (the file, or --set).
void scenario_validate(Scenario* s, const RawKeys& raw, const std::string& source) {
  try {
    s->model.validate();
    s->run.validate();
    s->audit.validate();
    s->bench.validate();
    s->task.validate();
    s->optim.validate("optim");
    s->sft.validate();
    // negative clip bounds mean "the algorithm's own" (RlConfig): -1 says so; another negative
    // number is a typo that would silently become the default
    for (const auto& [key, v] : {std::pair<const char*, float>{"rl.clip_low", s->rl.loss.clip_low},
                                 {"rl.clip_high", s->rl.loss.clip_high}})
      if (v < 0.0f && v != -1.0f)
        throw std::invalid_argument(std::string(key) + " = " + format_float(v) + ": must be >= 0, or -1 (the algorithm's default)");
    s->rl.resolve();
    s->rl.validate();
    scenario_check_task_fits(*s);
    scenario_check_profiles(*s);
  } catch (const std::invalid_argument& e) {
    std::string what = e.what();
    std::string origin = source;
    for (const auto& [key, v] : raw)
      if (what.rfind(key + " = ", 0) == 0) {
        origin = v.origin;
        // the value as it was given (1e30, not the 31 digits of a formatted float), shortened
        const size_t end = what.find(": ", key.size() + 3);
        if (end != std::string::npos) what = key + " = " + text_shown(v.value) + what.substr(end);
      }
    throw std::invalid_argument(origin + ": " + text_visible(what));
  }
}

}  // namespace

Scenario Scenario::parse(const std::string& text, const std::string& source,
                         const std::vector<std::string>& overrides) {
  const RawKeys raw = scenario_tokenise(text, source, overrides);
  Scenario s;
  s.source_ = source;
  Fields fixed;
  bind_fixed(fixed, &s);
  const ProfileKeys profile_raw = scenario_apply_fixed(raw, fixed);
  scenario_apply_algorithm(raw, fixed, s.rl.loss.algorithm);
  for (const auto& [name, fields_raw] : profile_raw)
    s.profiles.push_back(scenario_profile(name, fields_raw, source));
  scenario_validate(&s, raw, source);
  s.effective_ = scenario_effective_text(fixed, s.profiles, source);
  return s;
}

Scenario Scenario::load(const std::string& path, const std::vector<std::string>& overrides) {
  return parse(text_read_input(path, "scenario file", kScenarioMaxBytes), path, overrides);
}

Scenario Scenario::defaults(const std::vector<std::string>& overrides) {
  return parse("", "<defaults>", overrides);
}

bool Scenario::has_profile(const std::string& name) const {
  for (const NumericsProfile& p : profiles)
    if (p.name == name) return true;
  NumericsProfile tmp;
  return profile_builtin(name, &tmp);
}

NumericsProfile Scenario::profile(const std::string& name) const {
  for (const NumericsProfile& p : profiles)
    if (p.name == name) return p;
  NumericsProfile p;
  if (profile_builtin(name, &p)) return p;
  std::string user;
  for (const NumericsProfile& q : profiles) user += ", " + q.name;
  throw std::invalid_argument("unknown profile '" + name + "' (built-in: " +
                              profile_builtin_names() +
                              (user.empty() ? "" : "; in " + source_ + ":" + user.substr(1)) + ")");
}

std::string Scenario::reference() {
  Scenario s;
  Fields f;
  bind_fixed(f, &s);
  NumericsProfile p;
  bind_profile(f, "profile.NAME.", &p);
  std::string out;
  for (const Field& x : f.list) out += x.key + " = " + x.get() + "    # " + x.doc + "\n";
  out += "profile.NAME.base = fp32-ref    # built-in profile the section starts from (" +
         profile_builtin_names() + ")\n";
  return out;
}

}  // namespace moerl
