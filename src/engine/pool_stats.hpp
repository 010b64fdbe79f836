// A stream pool's statistics, kept cheap for the hot path: each one is split by pool kind (small,
// large) with the peak of their sum tracked exactly; an increase is a few adds and two compares, a
// decrease one subtraction, and `freed` is derived (allocated - current + the current at the last
// reset) instead of counted.
// Once a second stream allocates, every pool also feeds the totals over all pools (SharedPoolStats,
// whose peaks are exact): each operation's changes are logged once, with their time, when the pool's
// lock is released (PoolStats::publish).
#pragma once
#include <cstdint>
#include <memory>

#include "engine/shared_stats.hpp"
#include "engine/spin_lock.hpp"

#include "gpumem/stats.hpp"

namespace gpumem::engine {

class SplitStat {
 public:
  // kind: 0 small, 1 large.
  void increase(int kind, std::int64_t v) noexcept {
    cur_[kind] += v;
    allocated_[kind] += v;
    if (cur_[kind] > peak_[kind]) peak_[kind] = cur_[kind];
    std::int64_t all = cur_[0] + cur_[1];
    if (all > all_peak_) all_peak_ = all;
    if (shared_) unpublished_[kind] += v;
  }
  void decrease(int kind, std::int64_t v) noexcept {
    cur_[kind] -= v;
    if (shared_) unpublished_[kind] -= v;
  }
  // Moves the changes not yet in the shared totals into `out`; returns whether there were any.
  bool take_unpublished(std::int64_t out[2]) noexcept {
    out[0] = unpublished_[0];
    out[1] = unpublished_[1];
    unpublished_[0] = unpublished_[1] = 0;
    return out[0] || out[1];
  }
  // Counts v more made (and as many freed) with no change to the current value: a block freed and taken
  // again before anyone looked (StreamPool's lazy parking).
  void count_again(int kind, std::int64_t v) noexcept { allocated_[kind] += v; }
  // Rises by v and falls back at once: counted, and maybe a peak; the current value is unchanged.
  void visit(int kind, std::int64_t v) noexcept {
    allocated_[kind] += v;
    if (cur_[kind] + v > peak_[kind]) peak_[kind] = cur_[kind] + v;
    if (cur_[0] + cur_[1] + v > all_peak_) all_peak_ = cur_[0] + cur_[1] + v;
  }
  void set(int kind, std::int64_t v) noexcept {
    if (v > cur_[kind]) increase(kind, v - cur_[kind]);
    else if (v < cur_[kind]) decrease(kind, cur_[kind] - v);
  }
  // From now on also counts the changes for the shared totals.
  void share() noexcept { shared_ = true; }
  std::int64_t current(int kind) const noexcept { return cur_[kind]; }
  std::int64_t peak(int kind) const noexcept { return peak_[kind]; }
  std::int64_t all_peak() const noexcept { return all_peak_; }

  Stat get(PoolKind pool) const noexcept {
    Stat s;
    if (pool == kAggregatePool) {
      s.current = cur_[0] + cur_[1];
      s.peak = all_peak_;
      s.allocated = allocated_[0] + allocated_[1];
      s.freed = freed(0) + freed(1);
    } else {
      int k = pool == kSmallPool ? 0 : 1;
      s.current = cur_[k];
      s.peak = peak_[k];
      s.allocated = allocated_[k];
      s.freed = freed(k);
    }
    return s;
  }
  StatArray get_all() const noexcept { return {get(kAggregatePool), get(kSmallPool), get(kLargePool)}; }

  void reset_peak() noexcept {
    peak_[0] = cur_[0];
    peak_[1] = cur_[1];
    all_peak_ = cur_[0] + cur_[1];
  }
  void reset_accumulated() noexcept {
    allocated_[0] = allocated_[1] = 0;
    base_[0] = cur_[0];
    base_[1] = cur_[1];
  }

 private:
  std::int64_t freed(int k) const noexcept { return allocated_[k] - cur_[k] + base_[k]; }
  std::int64_t cur_[2] = {}, peak_[2] = {}, allocated_[2] = {}, base_[2] = {};
  std::int64_t all_peak_ = 0;
  std::int64_t unpublished_[2] = {};
  bool shared_ = false;
};

struct PoolStats {
  SplitStat allocation, active, inactive_split;
  SplitStat allocated_bytes, active_bytes, inactive_split_bytes, requested_bytes;

  template <typename Fn>
  void for_each(Fn&& fn) {
    for (SplitStat* s : {&allocation, &active, &inactive_split, &allocated_bytes, &active_bytes,
                         &inactive_split_bytes, &requested_bytes})
      fn(*s);
  }
  // From now on feeds `shared` (with `seed`, the first pool: its figures start the totals). Call with
  // the pool's lock and shared.lock() held.
  void share(SharedPoolStats& shared, bool seed);
  // Logs this operation's changes for the shared totals (the pool's lock held).
  void publish() noexcept {
    if (shared_) publish_shared();
  }
  bool shared() const noexcept { return shared_ != nullptr; }

 private:
  void publish_shared() noexcept;
  bool take_unpublished(StatTotals& change) noexcept;
  SharedPoolStats* shared_ = nullptr;
  std::unique_ptr<StatLog> log_;
};

}  // namespace gpumem::engine
