// threads.h — how many threads a moerl process computes with, and why: exactly the CPUs its
// allocation gives it. In order, the first that is set decides:
//   1. `--threads N` on the command line (any command);
//   2. OMP_NUM_THREADS (its first value), the convention every HPC code follows;
//   3. SLURM_CPUS_PER_TASK (srun/sbatch --cpus-per-task), at most the CPUs of the affinity mask;
//   4. the process's affinity mask (sched_getaffinity: taskset, mpirun's binding, SLURM's cgroup),
//      which is what oneTBB would take by itself, and which SLURM without task/affinity leaves at
//      the whole node — hence 3.
// The count limits oneTBB (tbb::global_control, for the process's lifetime) and so OpenBLAS, which
// the linear layer gives the threads oneTBB may use (kernels/linear.cpp). `moerl --version`, the
// sweep header and the run's first line print it with its reason.
#pragma once

#include <string>

namespace moerl {

struct ThreadChoice {
  int threads = 1;
  std::string why;  // "SLURM_CPUS_PER_TASK=2", "affinity mask: 2 of 4 CPUs", "--threads 3", ...
};

// The choice for a `--threads` value (0: not given). Throws std::invalid_argument naming the
// variable, its value and what is allowed when OMP_NUM_THREADS or SLURM_CPUS_PER_TASK is malformed.
ThreadChoice threads_resolve(int requested);
// Limits oneTBB to the choice (replacing an earlier one) and remembers it.
void threads_apply(const ThreadChoice& choice);
// The choice in force ("" why: none applied yet).
const ThreadChoice& threads_current();
// "2 threads (SLURM_CPUS_PER_TASK=2)".
std::string threads_describe();

}  // namespace moerl
