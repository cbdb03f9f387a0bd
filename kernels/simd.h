// simd.h — the instruction set the CPU kernels run on (run-time dispatch over the targets of
// kernels/simd_config.h), and restricting it.
//
// Names: "avx512" (Highway's AVX3: AVX-512 F/BW/DQ/VL), "avx2" (AVX2 + FMA), "neon" (and "sve",
// "sve2" once kernels/simd_config.h compiles them), "scalar" (Highway's SCALAR or EMU128: portable C++ without intrinsics), and "best" (no
// restriction: the best target this CPU supports). A kernel's output bits do not depend on the
// target (each output's operation order is fixed by the kernel, not by the vector width), so a
// restriction changes the speed, never a result; the tests run every kernel under every target.
// `moerl` reads the environment variable MOERL_SIMD (one of the names) before any command, and
// `moerl bench --simd NAME` does the same.
#pragma once

#include <string>
#include <vector>

namespace moerl {

// The target the kernels run on now, e.g. "avx512".
std::string simd_target();
// Targets this CPU supports among those compiled into this binary, best first.
std::vector<std::string> simd_targets_available();
// Every name simd_select accepts on this architecture (compiled targets + "best").
std::vector<std::string> simd_target_names();
// Restricts dispatch to `name` (and lets "best" lift the restriction). Throws
// std::invalid_argument naming `key`, the value and the allowed values when the name is unknown,
// not compiled in, or not supported by this CPU.
void simd_select(const std::string& name, const std::string& key = "MOERL_SIMD");
// simd_select(getenv("MOERL_SIMD")) when the variable is set and not empty.
void simd_select_from_env();

}  // namespace moerl
