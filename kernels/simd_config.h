// simd_config.h — which instruction sets the kernels are compiled for (Google Highway, included
// before any hwy/ header by every file that uses it, so that all agree on HWY_TARGETS).
//
// Every target Highway can reach on the build machine's architecture is compiled
// (HWY_COMPILE_ALL_ATTAINABLE: also those below the compiler's baseline, so that a -march=native
// build can still be restricted to AVX2 or scalar), except the ones that add compile time and
// nothing else: SSSE3/SSE4 (no FMA: no faster than scalar for the fused chains the kernels need)
// and AVX3_DL (AVX-512 plus instructions the kernels do not use) — and, for now, Arm's SVE
// targets: the register tiles of the GEMMs hold their accumulators in arrays of vectors, which
// SVE's sizeless vector types do not allow (writing those tiles without arrays is left to do).
// What remains:
//   x86-64: AVX3 (AVX-512 F/BW/DQ/VL), AVX2 (+FMA), SCALAR (portable C++, "scalar");
//   Arm:    NEON (AArch64), SCALAR.
// At run time the best target the CPU supports runs (HWY_DYNAMIC_DISPATCH); kernels/simd.h
// restricts that choice.
#pragma once

#ifndef HWY_COMPILE_ALL_ATTAINABLE
#define HWY_COMPILE_ALL_ATTAINABLE
#endif
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS \
  (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#endif

// GCC 12 reports the AVX-512 intrinsics' own _mm512_undefined_* pass-through operands as "maybe
// uninitialized" once Highway's wrappers inline them; they are never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
