// The statistics of every stream pool together, with peaks that are true peaks however many threads
// allocate at once.
//
// When nothing is logged and no other thread is publishing, an operation's changes go straight into
// the totals under this object's lock (one thread, on any number of streams: exact, as it is inside the
// operation). Otherwise, and for kBackoff operations after such contention, the pool logs them with the
// time they were made (stat_clock, read while the pool's lock is held, so inside the operation) into a
// ring of its own (StatLog): threads do not wait for each other. A fold merges the logs in time order
// into the totals and raises the peaks after each change, so the totals pass through states that
// existed and the peaks are exact. A fold takes every entry made before it began: a pool still writing
// one is waited for (a few instructions), one that starts after has a later time. Pools fold when their
// log is half full (if no other thread folds at that moment) or full (waiting for the lock); readers
// fold with every pool's lock held, so they see every operation made so far. The fold is serial: threads
// contending on several streams lose throughput for exact peaks (BENCHMARKS.md, 2026-11-24).
//
// Thread safety: append() is called by the pool that owns the log with its lock held; everything else
// with lock() held.
#pragma once
#include <atomic>
#include <cstdint>
#include <vector>

#include "engine/spin_lock.hpp"

namespace gpumem::engine {

constexpr int kStatCount = 7;  // PoolStats' statistics, in its order

// Every statistic's current value (or change), by pool kind (0 small, 1 large).
struct StatTotals {
  std::int64_t v[kStatCount][2] = {};
  void add(const StatTotals& d) noexcept {
    for (int i = 0; i < kStatCount; ++i) v[i][0] += d.v[i][0], v[i][1] += d.v[i][1];
  }
};

struct StatPeaks {
  std::int64_t kind[kStatCount][2] = {};
  std::int64_t all[kStatCount] = {};  // of the two kinds' sum
  void raise(const StatTotals& t) noexcept;
  void reset_to(const StatTotals& t) noexcept;
};

// A clock that orders operations across threads.
std::uint64_t stat_clock() noexcept;

// Two cache lines of their own: a pool writing the next one never takes the line a fold is reading.
struct alignas(128) TimedChange {
  std::uint64_t time;
  StatTotals change;
};

// One pool's operations not yet folded: written by the pool, read and emptied by folds.
struct StatLog {
  static constexpr std::uint64_t kSize = 256;
  static constexpr unsigned kBackoff = 64;  // operations logged without trying the totals, after contention
  alignas(64) std::atomic<std::uint64_t> head{0};  // entries written so far
  std::atomic<bool> writing{false};                // an entry is being timed and written
  unsigned backoff = 0;                            // the pool's own
  alignas(64) std::atomic<std::uint64_t> tail{0};  // entries folded so far
  TimedChange ring[kSize];
};

class SharedPoolStats {
 public:
  SpinLock& lock() noexcept { return lock_; }
  // Starts from the first pool's figures: the only pool so far, so its peaks are the true ones.
  void seed(const StatTotals& current, const StatPeaks& peaks) noexcept;
  void join(StatLog* log);
  // Logs one operation of the pool that owns `log` (its lock held; this lock not).
  void append(StatLog& log, const StatTotals& change) noexcept;
  // Folds every operation logged before this call; `everything` when no pool can be logging (the
  // caller holds every pool's lock).
  void fold(bool everything) noexcept;
  // The peaks up to the last fold.
  const StatPeaks& peaks() const noexcept { return peaks_; }
  // A new peak window from the totals of the last fold.
  void reset_peaks() noexcept { peaks_.reset_to(folded_); }

 private:
  bool nothing_logged() const noexcept;

  alignas(64) SpinLock lock_;
  alignas(64) StatTotals folded_;
  StatPeaks peaks_;
  std::vector<StatLog*> logs_;
  std::vector<std::uint64_t> cursors_, ends_;  // per log, during a fold
};

}  // namespace gpumem::engine
