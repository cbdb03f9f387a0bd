// main.cpp — the `moerl` program: pick OpenBLAS's AVX-512 kernels, start MPI, apply MOERL_SIMD
// (kernels/simd.h), run one command.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include "kernels/linear.h"
#include "kernels/simd.h"
#include "sim/cli/cli.h"
#include "sim/comm/comms.h"
#include "sim/process/preempt.h"

namespace {

// OpenBLAS chooses its kernel family once, when the library is loaded — before main() runs. 0.3.21
// does not recognise some AVX-512 CPUs and falls back to SSE3 "Prescott" kernels. So when the CPU
// has AVX-512F, the user did not choose a core type, and the loaded library did not pick an
// AVX-512 family by itself (SkylakeX, Cooperlake, SapphireRapids), set OPENBLAS_CORETYPE and
// re-execute this same binary with the same arguments (same process, so this also works under
// mpirun). MOERL_REEXEC guards against a loop if the exec'd image still lacks the variable.
bool blas_has_avx512_kernels() {
  const std::string name = moerl::blas_kernel_name();
  for (const char* core : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (name.find(core) != std::string::npos) return true;
  return false;
}

void reexec_with_openblas_coretype(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") || std::getenv("MOERL_REEXEC")) return;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || blas_has_avx512_kernels()) return;
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  setenv("MOERL_REEXEC", "1", 1);
  moerl::preempt_before_exec();  // a stop signal already received is not lost in the exec
  execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on with the kernels OpenBLAS picked.
  unsetenv("OPENBLAS_CORETYPE");
}

// The model allocates its large temporaries (activation gradients, expert buffers: up to tens of
// MB each) per call. glibc serves blocks that large with mmap and unmaps them on free, so every
// call paid page faults and the kernel's zeroing again — 15% of a training step in a profile of
// `moerl bench`. Served from the heap, and with the heap never trimmed, freed blocks keep their
// pages for the next call; the resident size stays at the peak the run needs anyway.
void keep_freed_memory() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);
}

// Started without a launcher (a singleton: `moerl run`, not `mpirun ... moerl run`), MPI_Init
// starts its own PMIx server, whose default shared-memory store writes megabytes of files: under
// a `ulimit -f` below that it fails inside MPI_Init with a page of PMIX ERROR lines and no moerl
// line. A singleton has one process and nothing to share, so it uses PMIx's plain hash store,
// which writes no files; the file-size limit then reaches moerl's own writes, which report it
// (EFBIG) like a full disk. Under a launcher the launcher has chosen already (a low `ulimit -f`
// must then be met with PMIX_MCA_gds=hash exported for mpirun itself: docs/reliability.md).
void singleton_pmix_without_files() {
  const bool launched = std::getenv("PMIX_RANK") || std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_RANK");
  if (!launched) setenv("PMIX_MCA_gds", "hash", 0);  // 0: a user's own choice stays
}

}  // namespace

int main(int argc, char** argv) {
  // Stop signals are held from here until the handlers take them (sim/preempt.h): through the
  // re-exec, which keeps the mask and the pending signals, and MPI_Init.
  moerl::preempt_block_signals();
  // A file-size limit (ulimit -f) then fails the write with EFBIG, reported like a full disk,
  // instead of killing the process with SIGXFSZ.
  signal(SIGXFSZ, SIG_IGN);
  reexec_with_openblas_coretype(argv);
  keep_freed_memory();
  singleton_pmix_without_files();
  moerl::Comms comms = moerl::comms_init(&argc, &argv);
  moerl::preempt_install_handlers();  // after MPI_Init, so they are ours (sim/process/preempt.h)
  int code = moerl::comms_run_guarded(comms, [&] {
    moerl::simd_select_from_env();  // MOERL_SIMD: every command, before any kernel runs
    return moerl::cli_main(comms, argc, argv);
  });
  // A stop signal means exit status 75 whatever phase it reached (sim/preempt.h): a command that
  // finished its work all the same says so, and a job script requeues it (it then has nothing to do).
  if (code == 0 && moerl::preempt_requested()) {
    if (comms.is_root)
      std::fprintf(stderr, "moerl: %s received after the command's work was done; exit status %d (stopped by a signal)\n",
                   moerl::preempt_signal_name()[0] ? moerl::preempt_signal_name() : "a stop signal", moerl::kExitPreempted);
    code = moerl::kExitPreempted;
  }
  code = moerl::comms_agree_exit(comms, code);  // idle ranks too exit with the job's status
  moerl::comms_finalize(&comms);
  return code;
}
