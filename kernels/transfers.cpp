// transfers.cpp — see transfers.h.
#include "kernels/transfers.h"

#include <cstdio>

#include "kernels/backend.h"

namespace moerl {

void TransferLog::add(CrossDir dir, CrossKind kind, int64_t bytes) {
  if (bytes <= 0) return;
  Cell& c = at(phase(), kind, dir);
  c.bytes += bytes;
  c.copies += 1;
}

void TransferLog::add(CrossDir dir, CrossKind kind, int64_t bytes, int64_t copies) {
  if (bytes <= 0 || copies <= 0) return;
  Cell& c = at(phase(), kind, dir);
  c.bytes += bytes;
  c.copies += copies;
}

int64_t TransferLog::bytes(TransferPhase p) const {
  int64_t s = 0;
  for (int k = 0; k < kCrossKinds; ++k) s += bytes(p, static_cast<CrossKind>(k));
  return s;
}

int64_t TransferLog::total() const {
  int64_t s = 0;
  for (int p = 0; p < kTransferPhases; ++p) s += bytes(static_cast<TransferPhase>(p));
  return s;
}

void TransferLog::reset() {
  for (Cell& c : cells_) {
    c.bytes = 0;
    c.copies = 0;
  }
}

std::string TransferLog::table(bool every_row) const {
  std::string s;
  char buf[160];
  for (int p = 0; p < kTransferPhases; ++p) {
    const auto ph = static_cast<TransferPhase>(p);
    if (bytes(ph) == 0 && !every_row) continue;
    for (int k = 0; k < kCrossKinds; ++k) {
      const auto kind = static_cast<CrossKind>(k);
      if (bytes(ph, kind) == 0 && !every_row) continue;
      std::snprintf(buf, sizeof(buf), "%-13s %-12s up %12lld B (%lld copies), down %12lld B (%lld copies)\n",
                    transfer_phase_name(ph), cross_kind_name(kind),
                    static_cast<long long>(bytes(ph, kind, CrossDir::up)),
                    static_cast<long long>(copies(ph, kind, CrossDir::up)),
                    static_cast<long long>(bytes(ph, kind, CrossDir::down)),
                    static_cast<long long>(copies(ph, kind, CrossDir::down)));
      s += buf;
    }
  }
  return s;
}

TransferPhaseScope::TransferPhaseScope(const Backend& be, TransferPhase p) : log_(be.transfers()) {
  if (!log_) return;
  prev_ = log_->phase();
  log_->set_phase(p);
}

TransferPhaseScope::~TransferPhaseScope() {
  if (log_) log_->set_phase(prev_);
}

}  // namespace moerl
