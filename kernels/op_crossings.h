// op_crossings.h — the crossings of one op call (kernels/transfers.h): for each pointer argument
// of the op that is not in the backend's own memory, its bytes, kind and direction. One member per
// op of kernels/ops.def, with the op's own signature, so a backend counts a call with
//   OpCrossings(*this, log).name(args...);  before running it.
// The extents are what the CUDA backend moves for a host argument (kernels/cuda/ops.cu, gemm.cu):
// inputs up, '=' outputs down, '+=' outputs (backward gradients, in-place RoPE, AdamW's w, m, v)
// up and down; the embedding table as far as the largest token id; attention_decode's caches up to
// each sequence's length; linear_pack_weight's FP32 weight up (the packed copy stays on the device).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/transfers.h"

namespace moerl {

class OpCrossings {
 public:
  OpCrossings(const Backend& be, TransferLog& log) : be_(be), log_(log) {}
#define MOERL_OP(name, params, args) void name params const;
#include "kernels/ops.def"

 private:
  void in(const void* p, size_t bytes, CrossKind k) const;     // read by the op
  void out(const void* p, size_t bytes, CrossKind k) const;    // written ('=')
  void inout(const void* p, size_t bytes, CrossKind k) const;  // read and written ('+=', in place)
  const Backend& be_;
  TransferLog& log_;
};

}  // namespace moerl
