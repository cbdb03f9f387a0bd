// transfers.h — what crosses between the host and a backend's device memory: the contract of
// run.backend = cuda (docs/gpu.md, "What crosses"), counted per RL-step phase and per kind of data.
//
// A backend with memory of its own (Backend::memory_space() == device: the CUDA backend, and the
// CPU-only TestDeviceBackend of kernels/test_device.h) has a TransferLog. Every op argument that
// is a HOST pointer is a crossing — an input is uploaded before the op (host → device), an output
// downloaded after it (device → host), a '+=' output both — and every argument in the backend's
// own memory is none; OpCrossings says which, with each argument's bytes, from the op's signature
// (one table for every such backend, so the test backend and the CUDA backend count alike). The
// explicit copies of Backend::mem_copy_2d between host and device count too, under the kind their
// caller names.
//
// What is NOT a crossing: a copy within the device, a packed weight used by linear_forward (it
// lives where the backend packed it), scalars passed by value.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "kernels/enum_names.h"

namespace moerl {

class Backend;

// The phase of an RL step a crossing belongs to (set by the caller: TransferPhaseScope).
enum class TransferPhase : uint8_t { other = 0, eval, rollout, old_logprobs, train, optimizer, count };
inline constexpr EnumNames<TransferPhase, 6> kTransferPhaseNames{
    {"other", "eval", "rollout", "old_logprobs", "train", "optimizer"}};
static_assert(static_cast<int>(TransferPhase::count) == kTransferPhaseNames.size());
inline const char* transfer_phase_name(TransferPhase p) { return kTransferPhaseNames.name(p); }

// What crossed: activations (and their gradients, logits, attention probabilities, router scores:
// anything with a width — D, F, V or E — per row), parameters, parameter gradients, optimizer
// moments, the KV cache, integer indices (tokens, targets, positions, expert ids, lengths,
// offsets), and per-token results: a few floats per token that the host reads or writes by design
// (the targets' log-probs, the router's log-probs at the selected ids, their gradients from the
// loss) — no width term, so a step's per_token bytes are bounded by its rows alone.
enum class CrossKind : uint8_t { activations = 0, weights, grads, optimizer, kv_cache, indices, per_token, count };
inline constexpr EnumNames<CrossKind, 7> kCrossKindNames{
    {"activations", "weights", "grads", "optimizer", "kv_cache", "indices", "per_token"}};
static_assert(static_cast<int>(CrossKind::count) == kCrossKindNames.size());
inline const char* cross_kind_name(CrossKind k) { return kCrossKindNames.name(k); }

enum class CrossDir : uint8_t { up = 0, down };  // host → device, device → host

inline constexpr int kTransferPhases = static_cast<int>(TransferPhase::count);
inline constexpr int kCrossKinds = static_cast<int>(CrossKind::count);

// Bytes and copies per (phase, kind, direction). Counting is thread-safe; the phase is the
// backend's (one step runs at a time on a backend).
class TransferLog {
 public:
  void add(CrossDir dir, CrossKind kind, int64_t bytes);
  // `copies` copies of `bytes` in all (a replayed graph's crossings, counted at each launch).
  void add(CrossDir dir, CrossKind kind, int64_t bytes, int64_t copies);
  TransferPhase phase() const { return phase_.load(); }
  void set_phase(TransferPhase p) { phase_.store(p); }
  int64_t bytes(TransferPhase p, CrossKind k, CrossDir d) const { return at(p, k, d).bytes.load(); }
  int64_t copies(TransferPhase p, CrossKind k, CrossDir d) const { return at(p, k, d).copies.load(); }
  int64_t bytes(TransferPhase p, CrossKind k) const { return bytes(p, k, CrossDir::up) + bytes(p, k, CrossDir::down); }
  int64_t bytes(TransferPhase p) const;  // every kind, both directions
  int64_t total() const;                 // every phase
  void reset();
  // One line per (phase, kind) that saw a crossing: "rollout  activations up 1.2 MB (340) down …";
  // with every_row, every phase and kind, the zero ones included (what no longer crosses shows).
  std::string table(bool every_row = false) const;

 private:
  struct Cell {
    std::atomic<int64_t> bytes{0}, copies{0};
  };
  Cell& at(TransferPhase p, CrossKind k, CrossDir d) {
    return cells_[(static_cast<size_t>(p) * kCrossKinds + static_cast<size_t>(k)) * 2 + static_cast<size_t>(d)];
  }
  const Cell& at(TransferPhase p, CrossKind k, CrossDir d) const {
    return cells_[(static_cast<size_t>(p) * kCrossKinds + static_cast<size_t>(k)) * 2 + static_cast<size_t>(d)];
  }
  std::array<Cell, static_cast<size_t>(kTransferPhases) * kCrossKinds * 2> cells_{};
  std::atomic<TransferPhase> phase_{TransferPhase::other};
};

// Sets the phase of `be`'s transfer log (if it has one) for the scope, and restores the previous.
class TransferPhaseScope {
 public:
  TransferPhaseScope(const Backend& be, TransferPhase p);
  ~TransferPhaseScope();
  TransferPhaseScope(const TransferPhaseScope&) = delete;
  TransferPhaseScope& operator=(const TransferPhaseScope&) = delete;

 private:
  TransferLog* log_;
  TransferPhase prev_ = TransferPhase::other;
};

}  // namespace moerl
