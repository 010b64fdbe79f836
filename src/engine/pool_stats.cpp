#include "engine/pool_stats.hpp"

namespace gpumem::engine {

void PoolStats::share(SharedPoolStats& shared, bool seed) {
  log_ = std::make_unique<StatLog>();
  shared.join(log_.get());
  StatTotals current;
  StatPeaks peaks;
  int i = 0;
  for_each([&](SplitStat& s) {
    for (int k = 0; k < 2; ++k) {
      current.v[i][k] = s.current(k);
      peaks.kind[i][k] = s.peak(k);
    }
    peaks.all[i++] = s.all_peak();
    s.share();
  });
  shared_ = &shared;
  if (seed) shared.seed(current, peaks);  // a pool that joins later is new: nothing to add
}

bool PoolStats::take_unpublished(StatTotals& change) noexcept {
  bool any = false;
  int i = 0;
  for_each([&](SplitStat& s) { any |= s.take_unpublished(change.v[i++]); });
  return any;
}

void PoolStats::publish_shared() noexcept {
  StatTotals change;
  if (take_unpublished(change)) shared_->append(*log_, change);
}

}  // namespace gpumem::engine
