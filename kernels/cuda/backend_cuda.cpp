// backend_cuda.cpp — the CUDA backend: kernels/cuda/ops.h and gemm.h behind the Backend seam, with
// device memory of its own (cudaMalloc; copies by cudaMemcpy2D) and the host↔device crossings of
// every op and copy counted in its transfer log (kernels/transfers.h, OpCrossings: the same
// accounting as the CPU-only TestDeviceBackend's, so the CI test of the contract speaks for it).
// Everything runs on the per-thread default stream (kernels/CMakeLists.txt), which op graphs
// record by stream capture (Backend::graph_begin: CUDA Graphs); MOERL_CUDA_GRAPHS=0 turns them off.
#include "kernels/cuda/backend_cuda.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/buffer.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "kernels/op_crossings.h"

namespace moerl::cuda {

namespace {

// An instantiated capture, with the crossings its copies and ops make at each launch.
struct CudaGraph final : Backend::Graph {
  struct Crossing {
    CrossDir dir;
    CrossKind kind;
    int64_t bytes, copies;
  };
  cudaGraphExec_t exec = nullptr;
  uint64_t epoch = 0;  // device_memory_epoch() when recorded
  std::vector<Crossing> crossings;
  ~CudaGraph() override {
    if (exec) cudaGraphExecDestroy(exec);  // errors at teardown are ignored
  }
};

std::atomic<bool>& graphs_on() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("MOERL_CUDA_GRAPHS");
    return !(v && std::strcmp(v, "0") == 0);
  }()};
  return on;
}

class CudaBackend final : public Backend {
  static constexpr size_t kNarrow = 512;  // bytes: narrower rows are staged (mem_copy_2d)
  static constexpr int kStageSlot = 15;   // device_scratch slot of the staging (the ops use 0..6)

 public:
  BackendKind kind() const override { return BackendKind::cuda; }
  std::string describe() const override { return "cuda: " + device_description() + "; " + gemm_describe(); }

  MemorySpace memory_space() const override { return MemorySpace::device; }
  // The model's activation buffers come and go per call (models/workspace.h, ActBuffer): from the
  // device's stream-ordered pool where it has one (cudaMallocAsync on the per-thread default stream
  // every op runs on: a freed block is reused without a device-wide synchronisation), else
  // cudaMalloc.
  void* mem_alloc(size_t bytes) const override {
    void* p = nullptr;
    if (pools_) MOERL_CUDA_CHECK(cudaMallocAsync(&p, bytes ? bytes : 1, cudaStreamPerThread));
    else MOERL_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    device_block_register(p, bytes);
    device_memory_moved();
    return p;
  }
  void mem_free(void* p) const override {
    if (!p) return;
    device_block_unregister(p);
    device_memory_moved();
    // errors at teardown are ignored (the runtime may be shutting down)
    if (pools_) cudaFreeAsync(p, cudaStreamPerThread);
    else cudaFree(p);
  }
  void mem_zero(void* p, size_t bytes) const override {
    if (bytes) MOERL_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cudaStreamPerThread));
  }
  void mem_copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                   CopyDir dir, CrossKind kind) const override {
    if (!width || !height) return;
    const cudaMemcpyKind k = dir == CopyDir::to_device ? cudaMemcpyHostToDevice
                             : dir == CopyDir::to_host ? cudaMemcpyDeviceToHost
                                                       : cudaMemcpyDeviceToDevice;
    if (dir == CopyDir::to_device) counting_->add(CrossDir::up, kind, static_cast<int64_t>(width * height));
    if (dir == CopyDir::to_host) counting_->add(CrossDir::down, kind, static_cast<int64_t>(width * height));
    if (capturing_) {  // a node of the graph: its host side must be host_alloc'd (pinned) memory
      MOERL_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, k, cudaStreamPerThread));
      return;
    }
    if (dir == CopyDir::to_device && width < kNarrow && height > 1) {
      // Narrow rows (a decode step's key column: 4-byte rows at the cache's pitch) cross as one
      // contiguous upload, then spread on the device: a host-to-device 2D copy of many tiny rows
      // is slow, a device-to-device one is a kernel.
      void* stage = device_scratch(kStageSlot, width * height);
      if (spitch == width) MOERL_CUDA_CHECK(cudaMemcpy(stage, src, width * height, cudaMemcpyHostToDevice));
      else MOERL_CUDA_CHECK(cudaMemcpy2D(stage, width, src, spitch, width, height, cudaMemcpyHostToDevice));
      MOERL_CUDA_CHECK(cudaMemcpy2D(dst, dpitch, stage, width, width, height, cudaMemcpyDeviceToDevice));
      return;
    }
    MOERL_CUDA_CHECK(cudaMemcpy2D(dst, dpitch, src, spitch, width, height, k));
  }
  bool is_device_pointer(const void* p) const override { return cuda::is_device_pointer(p); }
  TransferLog* transfers() const override { return &log_; }

#define MOERL_OP(name, params, args)         \
  void name params const override {          \
    OpCrossings(*this, *counting_).name args; \
    cuda::name args;                         \
  }
#include "kernels/ops.def"

  // ---- op graphs: stream capture of the per-thread default stream ----
  bool graphs() const override { return graphs_on().load(); }
  void graph_begin() const override {
    if (!graphs()) Backend::graph_begin();
    if (capturing_) throw std::logic_error("cuda graph_begin: already recording");
    capture_log_.reset();
    capture_log_.set_phase(log_.phase());
    MOERL_CUDA_CHECK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    counting_ = &capture_log_;
  }
  // Null (and graph_failure() says why) where the capture was invalidated — an op that
  // synchronised, allocated or copied pageable memory — or cannot be instantiated.
  std::unique_ptr<Graph> graph_end() const override {
    if (!capturing_) throw std::logic_error("cuda graph_end: not recording");
    capturing_ = false;
    counting_ = &log_;
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(cudaStreamPerThread, &g);
    if (e != cudaSuccess || !g) {
      failure_ = std::string("stream capture: ") + cudaGetErrorString(e);
      (void)cudaGetLastError();
      if (g) cudaGraphDestroy(g);
      return nullptr;
    }
    auto graph = std::make_unique<CudaGraph>();
    const cudaError_t ie = cudaGraphInstantiate(&graph->exec, g, 0);
    cudaGraphDestroy(g);
    if (ie != cudaSuccess) {
      failure_ = std::string("graph instantiation: ") + cudaGetErrorString(ie);
      (void)cudaGetLastError();
      graph->exec = nullptr;
      return nullptr;
    }
    const TransferPhase ph = capture_log_.phase();
    for (int k = 0; k < kCrossKinds; ++k)
      for (CrossDir d : {CrossDir::up, CrossDir::down}) {
        const auto kind = static_cast<CrossKind>(k);
        const int64_t copies = capture_log_.copies(ph, kind, d);
        if (copies > 0) graph->crossings.push_back({d, kind, capture_log_.bytes(ph, kind, d), copies});
      }
    graph->epoch = device_memory_epoch();
    ++recorded_;
    return graph;
  }
  bool graph_launch(const Graph& g) const override {
    const auto* cg = dynamic_cast<const CudaGraph*>(&g);
    if (!cg || !cg->exec) throw std::invalid_argument("cuda graph_launch: not a graph of this backend");
    if (cg->epoch != device_memory_epoch()) return false;  // memory moved since: record again
    MOERL_CUDA_CHECK(cudaGraphLaunch(cg->exec, cudaStreamPerThread));
    for (const CudaGraph::Crossing& c : cg->crossings) log_.add(c.dir, c.kind, c.bytes, c.copies);
    ++launches_;
    return true;
  }
  std::string graph_failure() const override { return failure_; }
  int64_t graph_launches() const override { return launches_; }
  int64_t graphs_recorded() const override { return recorded_; }
  void sync() const override { MOERL_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread)); }
  void* host_alloc(size_t bytes) const override {
    void* p = nullptr;
    MOERL_CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault));
    return p;
  }
  void host_free(void* p) const override {
    if (p) cudaFreeHost(p);  // errors at teardown are ignored
  }

 private:
  // True where the device has a stream-ordered pool; its release threshold is then raised so that
  // the pool keeps what it holds across synchronisations (every cudaMemcpy is one) instead of
  // handing it back to the driver at each, which would make every allocation a cudaMalloc again.
  static bool memory_pools() {
    int dev = 0, on = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&on, cudaDevAttrMemoryPoolsSupported, dev) != cudaSuccess || on == 0)
      return false;
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess) return false;
    uint64_t keep = UINT64_MAX;
    return cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess;
  }
  const bool pools_ = memory_pools();
  mutable TransferLog log_;
  mutable TransferLog capture_log_;           // what a capture's ops and copies cross at each launch
  mutable TransferLog* counting_ = &log_;     // log_, or capture_log_ while capturing
  mutable bool capturing_ = false;
  mutable std::string failure_;
  mutable int64_t launches_ = 0, recorded_ = 0;
};

}  // namespace

void set_cuda_graphs(bool on) { graphs_on().store(on); }

const Backend& cuda_backend() {
  if (device_count() == 0)
    throw std::runtime_error("cuda backend: " + device_description());
  static const CudaBackend b;
  return b;
}

}  // namespace moerl::cuda
