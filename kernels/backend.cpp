// backend.cpp — backend names, the Op name table, and the CPU backend (kernels/cpu + kernels/linear).
#include "kernels/backend.h"

#include <tbb/global_control.h>
#include <tbb/info.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "kernels/backend_ops.h"
#include "kernels/cpu/ops.h"

namespace moerl {

namespace {
constexpr const char* kOpNames[] = {
#define MOERL_OP(name, params, args) #name,
#include "kernels/ops.def"
};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == kOpCount,
              "every Op needs its name in kOpNames");

// An entry's arguments must be its parameters' names in order: the forwarding generated from it
// (OpsBackend, the counting test backend) would otherwise pass, say, N for D without a
// diagnostic wherever the two have one type. Checked on the entries' spelling.
constexpr bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
// The name a parameter declares: "const ReduceCtx& ctx" -> "ctx".
constexpr std::string_view declared_name(std::string_view decl) {
  size_t end = decl.size();
  while (end > 0 && !is_ident_char(decl[end - 1])) --end;
  size_t begin = end;
  while (begin > 0 && is_ident_char(decl[begin - 1])) --begin;
  return decl.substr(begin, end - begin);
}
constexpr std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}
// params "(float* out, const float* x, int N)" and args "(out, x, N)", as the preprocessor
// spells them: true when each argument is exactly its parameter's name and none is left over.
constexpr bool args_name_params(std::string_view params, std::string_view args) {
  params = params.substr(1, params.size() - 2);
  args = args.substr(1, args.size() - 2);
  while (true) {
    const size_t p = params.find(','), a = args.find(',');
    if ((p == std::string_view::npos) != (a == std::string_view::npos)) return false;
    if (declared_name(params.substr(0, p)) != trim(args.substr(0, a))) return false;
    if (p == std::string_view::npos) return true;
    params.remove_prefix(p + 1);
    args.remove_prefix(a + 1);
  }
}
static_assert(args_name_params("(float* out, const ReduceCtx& ctx, int N)", "(out, ctx, N)"));
static_assert(!args_name_params("(int N, int D)", "(D, N)") &&
              !args_name_params("(int N, int D)", "(N)") &&
              !args_name_params("(int N)", "(N, N)") && !args_name_params("(int N)", "(N + 1)"));
#define MOERL_OP(name, params, args)                \
  static_assert(args_name_params(#params, #args), \
                "kernels/ops.def, " #name ": the arguments must name the parameters in order");
#include "kernels/ops.def"

// The CPU backend: kernels/cpu and the linear layer of kernels/linear.h.
struct CpuOps {
  static constexpr BackendKind kind = BackendKind::cpu;
  static std::string describe() {
    // oneTBB's threads as limited (tbb::global_control: the allocation's, sim/process/threads.h), not the machine's
    const size_t threads = std::min(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism),
                                    static_cast<size_t>(tbb::info::default_concurrency()));
    return "cpu (" + std::to_string(threads) + " threads, " +
           blas_kernel_name() + ")";
  }
#define MOERL_OP(name, params, args) static constexpr void(*name) params = &cpu::name;
#define MOERL_LINEAR_OP(name, params, args) static constexpr void(*name) params = &moerl::name;
#include "kernels/ops.def"
};
}  // namespace

void* Backend::mem_alloc(size_t bytes) const {
  // 64-byte aligned host memory, the size rounded up as aligned_alloc requires
  void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}

void Backend::mem_free(void* p) const { std::free(p); }

void Backend::mem_zero(void* p, size_t bytes) const {
  if (bytes) std::memset(p, 0, bytes);
}

void Backend::mem_copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                          size_t height, CopyDir /*dir*/, CrossKind /*kind*/) const {
  if (width == dpitch && width == spitch) {
    if (width * height != 0) std::memcpy(dst, src, width * height);
    return;
  }
  for (size_t i = 0; i < height; ++i)
    std::memcpy(static_cast<char*>(dst) + i * dpitch, static_cast<const char*>(src) + i * spitch, width);
}

void Backend::graph_begin() const {
  throw std::logic_error("backend " + describe() + ": no op graphs (Backend::graphs() is false)");
}
std::unique_ptr<Backend::Graph> Backend::graph_end() const { graph_begin(); return nullptr; }
bool Backend::graph_launch(const Graph&) const {
  graph_begin();
  return false;
}

void* Backend::host_alloc(size_t bytes) const { return Backend::mem_alloc(bytes); }
void Backend::host_free(void* p) const { Backend::mem_free(p); }

const char* op_name(Op op) {
  const int i = static_cast<int>(op);
  return i >= 0 && i < kOpCount ? kOpNames[i] : "?";
}

const Backend& cpu_backend() {
  static const OpsBackend<CpuOps> b;
  return b;
}

}  // namespace moerl
