// collectives.cpp — the single-process group (see collectives.h).
#include "models/collectives.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace moerl {

void LocalCollectives::alltoallv(float* recv, const int* recv_rows, const float* send,
                                 const int* send_rows, int width) {
  if (recv_rows[0] != send_rows[0])
    throw std::logic_error("alltoallv: a group of one sends " + std::to_string(send_rows[0]) +
                           " rows to itself but expects " + std::to_string(recv_rows[0]));
  if (recv != send) std::memmove(recv, send, sizeof(float) * send_rows[0] * static_cast<size_t>(width));
}

void LocalCollectives::alltoall(int32_t* recv, const int32_t* send, int n) {
  if (recv != send) std::memmove(recv, send, sizeof(int32_t) * n);
}

void LocalCollectives::allgatherv(double* recv, const int64_t* counts, const double* send) {
  if (recv != send) std::copy_n(send, counts[0], recv);
}
void LocalCollectives::allgatherv(float* recv, const int64_t* counts, const float* send) {
  if (recv != send) std::copy_n(send, counts[0], recv);
}
void LocalCollectives::allgatherv(int32_t* recv, const int64_t* counts, const int32_t* send) {
  if (recv != send) std::copy_n(send, counts[0], recv);
}

std::vector<int64_t> collectives_gather_counts(Collectives& c, int64_t mine) {
  std::vector<double> all(static_cast<size_t>(c.size()));
  const std::vector<int64_t> ones(static_cast<size_t>(c.size()), 1);
  const double x = static_cast<double>(mine);  // counts stay far below 2^53
  c.allgatherv(all.data(), ones.data(), &x);
  std::vector<int64_t> out(all.size());
  for (size_t i = 0; i < all.size(); ++i) out[i] = static_cast<int64_t>(all[i]);
  return out;
}

}  // namespace moerl
