// hd.h — MOERL_HD marks per-element and per-row math that both the CPU and the CUDA kernels run:
// `__host__ __device__` under nvcc, nothing under the host compiler. Functions marked with it live
// in headers (kernels/cuda/hd/), take plain pointers and sizes, allocate nothing and call only
// other MOERL_HD functions, so the host tests (tests/cuda_host) check on the CPU exactly the code
// the GPU kernels execute.
#pragma once

#if defined(__CUDACC__)
#define MOERL_HD __host__ __device__ inline
#else
#define MOERL_HD inline
#endif
