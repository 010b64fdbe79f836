// A stream pool's statistics, kept cheap for the hot path: each one is split by pool kind (small,
// large) with the peak of their sum tracked exactly; an increase is a few adds and two compares, a
// decrease one subtraction, and `freed` is derived (allocated - current + the current at the last
// reset) instead of counted.
// Once a second stream allocates, every pool also feeds one SharedSplit per statistic: the currents
// of all streams together as atomics, whose peaks are exact (each fetch_add returns a true value of
// the total; the peak rises by a CAS only when it is passed). With one stream it costs a null test.
// A pool publishes its changes to the shared totals once per operation, when its lock is released
// (PoolStats::publish), under one lock of the shared totals taken only if free: one thread allocating
// on any number of streams publishes every operation, so its peaks are exact; threads that find the
// totals busy keep their changes and publish them with their next operation, so several threads on
// several streams scale instead of contending for the shared counters on every change (their peaks
// then count each thread's unpublished operations at the moment they are published).
#pragma once
#include <atomic>
#include <cstdint>

#include "engine/spin_lock.hpp"

#include "gpumem/stats.hpp"

namespace gpumem::engine {

// One statistic over all stream pools together.
class SharedSplit {
 public:
  void add(int kind, std::int64_t v) noexcept {
    std::int64_t cur = cur_[kind].fetch_add(v, std::memory_order_relaxed) + v;
    std::int64_t all = all_.fetch_add(v, std::memory_order_relaxed) + v;
    if (v > 0) {
      raise(peak_[kind], cur);
      raise(all_peak_, all);
    }
  }
  // Starts from one pool's figures (the only pool so far, so its peaks are the true ones).
  void seed(const std::int64_t cur[2], const std::int64_t peak[2], std::int64_t all_peak) noexcept {
    for (int k = 0; k < 2; ++k) {
      cur_[k].store(cur[k], std::memory_order_relaxed);
      peak_[k].store(peak[k], std::memory_order_relaxed);
    }
    all_.store(cur[0] + cur[1], std::memory_order_relaxed);
    all_peak_.store(all_peak, std::memory_order_relaxed);
  }
  std::int64_t peak(int kind) const noexcept { return peak_[kind].load(std::memory_order_relaxed); }
  std::int64_t all_peak() const noexcept { return all_peak_.load(std::memory_order_relaxed); }
  void reset_peak() noexcept {
    for (int k = 0; k < 2; ++k) peak_[k].store(cur_[k].load(std::memory_order_relaxed), std::memory_order_relaxed);
    all_peak_.store(all_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }

 private:
  static void raise(std::atomic<std::int64_t>& peak, std::int64_t v) noexcept {
    std::int64_t old = peak.load(std::memory_order_relaxed);
    while (old < v && !peak.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
    }
  }
  std::atomic<std::int64_t> cur_[2] = {}, peak_[2] = {}, all_{0}, all_peak_{0};
};

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
  // Adds the changes not yet in the shared totals: the decreases (increases = false) or the increases,
  // so that publishing decreases first never shows a total that did not exist.
  void publish(bool increases) noexcept {
    for (int k = 0; k < 2; ++k) {
      if (unpublished_[k] == 0 || (unpublished_[k] > 0) != increases) continue;
      shared_->add(k, unpublished_[k]);
      unpublished_[k] = 0;
    }
  }
  void set(int kind, std::int64_t v) noexcept {
    if (v > cur_[kind]) increase(kind, v - cur_[kind]);
    else if (v < cur_[kind]) decrease(kind, cur_[kind] - v);
  }
  // From now on also feeds `shared`; with `seed`, shared starts from this pool's figures.
  void share(SharedSplit* shared, bool seed) noexcept {
    if (seed) shared->seed(cur_, peak_, all_peak_);
    else shared->add(0, cur_[0]), shared->add(1, cur_[1]);
    shared_ = shared;
  }
  std::int64_t current(int kind) const noexcept { return cur_[kind]; }

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
  SharedSplit* shared_ = nullptr;
};

// The statistics of PoolStats over all pools, in the same order.
struct SharedPoolStats {
  alignas(64) SpinLock lock;  // held while one pool publishes (PoolStats::publish)
  alignas(64) SharedSplit allocation, active, inactive_split;
  SharedSplit allocated_bytes, active_bytes, inactive_split_bytes, requested_bytes;

  template <typename Fn>
  void for_each(Fn&& fn) {
    for (SharedSplit* s : {&allocation, &active, &inactive_split, &allocated_bytes, &active_bytes,
                           &inactive_split_bytes, &requested_bytes})
      fn(*s);
  }
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
  void share(SharedPoolStats& shared, bool seed) noexcept {
    SplitStat* mine[] = {&allocation, &active, &inactive_split, &allocated_bytes, &active_bytes,
                         &inactive_split_bytes, &requested_bytes};
    SharedSplit* theirs[] = {&shared.allocation, &shared.active, &shared.inactive_split, &shared.allocated_bytes,
                             &shared.active_bytes, &shared.inactive_split_bytes, &shared.requested_bytes};
    for (int i = 0; i < 7; ++i) mine[i]->share(theirs[i], seed);
    shared_ = &shared;
  }
  // Publishes this pool's changes to the shared totals; without `wait` only if no other pool is
  // publishing (else they stay for a later call). Returns false when they stayed.
  bool publish(bool wait) noexcept {
    if (!shared_) return true;
    if (wait) shared_->lock.lock();
    else if (!shared_->lock.try_lock()) return false;
    for_each([](SplitStat& s) { s.publish(false); });
    for_each([](SplitStat& s) { s.publish(true); });
    shared_->lock.unlock();
    return true;
  }

 private:
  SharedPoolStats* shared_ = nullptr;
};

}  // namespace gpumem::engine
