// threads.cpp — see threads.h.
#include "sim/process/threads.h"

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include <tbb/global_control.h>

namespace moerl {

namespace {

ThreadChoice g_choice{0, ""};
// Never destroyed: it must outlive every thread pool, static destructors included.
tbb::global_control* g_limit = nullptr;

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

// A positive thread count from an environment variable; 0 when unset or empty.
int env_count(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  std::string text(v);
  const std::string first = text.substr(0, text.find(','));  // OMP_NUM_THREADS=4,2: the outer level
  char* end = nullptr;
  const long n = std::strtol(first.c_str(), &end, 10);
  if (first.empty() || *end || n < 1 || n > 4096)
    throw std::invalid_argument(std::string(name) + " = '" + text + "': must be a number of threads from 1 to 4096");
  return static_cast<int>(n);
}

}  // namespace

ThreadChoice threads_resolve(int requested) {
  if (requested < 0)
    throw std::invalid_argument("--threads " + std::to_string(requested) + ": must be >= 1 (or 0: as the allocation says)");
  const int online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const int mask = affinity_cpus() > 0 ? affinity_cpus() : (online > 0 ? online : 1);
  if (requested > 0) return {requested, "--threads " + std::to_string(requested)};
  if (const int n = env_count("OMP_NUM_THREADS")) return {n, "OMP_NUM_THREADS=" + std::to_string(n)};
  if (const int n = env_count("SLURM_CPUS_PER_TASK")) {
    if (n <= mask) return {n, "SLURM_CPUS_PER_TASK=" + std::to_string(n)};
    return {mask, "SLURM_CPUS_PER_TASK=" + std::to_string(n) + ", but the affinity mask has " + std::to_string(mask) + " CPUs"};
  }
  return {mask, "affinity mask: " + std::to_string(mask) + " of " + std::to_string(online) + " CPUs"};
}

void threads_apply(const ThreadChoice& choice) {
  delete g_limit;  // global_control objects nest (the smallest wins): the new choice replaces the old
  g_limit = new tbb::global_control(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(choice.threads));
  g_choice = choice;
}

const ThreadChoice& threads_current() { return g_choice; }

std::string threads_describe() {
  if (g_choice.why.empty()) return "threads as oneTBB chooses";
  // oneTBB's own limit, not the choice: what the kernels really get
  const size_t n = tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  return std::to_string(n) + " thread" + (n == 1 ? "" : "s") + " (" + g_choice.why + ")";
}

}  // namespace moerl
