#include "engine/shared_stats.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace gpumem::engine {

void StatPeaks::raise(const StatTotals& t) noexcept {
  for (int i = 0; i < kStatCount; ++i) {
    kind[i][0] = std::max(kind[i][0], t.v[i][0]);
    kind[i][1] = std::max(kind[i][1], t.v[i][1]);
    all[i] = std::max(all[i], t.v[i][0] + t.v[i][1]);
  }
}

void StatPeaks::reset_to(const StatTotals& t) noexcept {
  for (int i = 0; i < kStatCount; ++i) {
    kind[i][0] = t.v[i][0];
    kind[i][1] = t.v[i][1];
    all[i] = t.v[i][0] + t.v[i][1];
  }
}

std::uint64_t stat_clock() noexcept {
  // The kernel's monotonic clock is consistent across CPUs (a raw time-stamp counter need not be), and
  // is read in order with what precedes it (the vDSO fences its counter read).
  const auto t = std::chrono::steady_clock::now().time_since_epoch();
  return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t).count());
}

void SharedPoolStats::seed(const StatTotals& current, const StatPeaks& peaks) noexcept {
  folded_ = current;
  peaks_ = peaks;
}

void SharedPoolStats::join(StatLog* log) {
  logs_.push_back(log);
  cursors_.resize(logs_.size());
  ends_.resize(logs_.size());
}

bool SharedPoolStats::nothing_logged() const noexcept {
  // A pool marks itself as writing before it reads the time of an entry, so one that starts after
  // these loads logs a later time than the change applied now.
  for (const StatLog* log : logs_)
    if (log->writing.load(std::memory_order_seq_cst) ||
        log->head.load(std::memory_order_acquire) != log->tail.load(std::memory_order_relaxed))
      return false;
  return true;
}

void SharedPoolStats::append(StatLog& log, const StatTotals& change) noexcept {
  // Nothing logged and nobody else publishing: straight into the totals (one thread alone, on any
  // number of streams). After contention the pool logs for a while without trying.
  if (log.backoff > 0) {
    --log.backoff;
  } else if (lock_.try_lock()) {
    const bool direct = nothing_logged();
    if (direct) {
      folded_.add(change);
      peaks_.raise(folded_);
    }
    lock_.unlock();
    if (direct) return;
    log.backoff = StatLog::kBackoff;
  } else {
    log.backoff = StatLog::kBackoff;
  }
  const std::uint64_t h = log.head.load(std::memory_order_relaxed);
  while (h - log.tail.load(std::memory_order_acquire) >= StatLog::kSize) {  // full: fold, waiting for it
    std::lock_guard g(lock_);
    fold(false);
  }
  // Marked as writing before the time is read: a fold that does not see the mark began earlier.
  log.writing.store(true, std::memory_order_seq_cst);
  log.ring[h % StatLog::kSize] = {stat_clock(), change};
  log.head.store(h + 1, std::memory_order_release);
  log.writing.store(false, std::memory_order_release);
  if (h + 1 - log.tail.load(std::memory_order_relaxed) >= StatLog::kSize / 2 && lock_.try_lock()) {
    fold(false);
    lock_.unlock();
  }
}

void SharedPoolStats::fold(bool everything) noexcept {
  // Strictly before `now`: an entry timed after the writing marks were read may carry the same time.
  const std::uint64_t now = everything ? ~std::uint64_t(0) : stat_clock();
#if defined(__x86_64__) || defined(__i386__)
  _mm_lfence();  // the writing marks below are loaded after the clock was read
#endif
  const std::size_t n = logs_.size();
  for (std::size_t i = 0; i < n; ++i) {
    // An entry being written may be older than `now`: wait for it (its time and a copy).
    for (int spins = 0; logs_[i]->writing.load(std::memory_order_seq_cst); ++spins)
      if (spins > 64) std::this_thread::yield();
    cursors_[i] = logs_[i]->tail.load(std::memory_order_relaxed);
    ends_[i] = logs_[i]->head.load(std::memory_order_acquire);
  }
  // Merge by time: each log is in time order; entries made after `now` wait for the next fold.
  while (true) {
    std::size_t best = n;
    std::uint64_t best_time = now;
    for (std::size_t i = 0; i < n; ++i) {
      if (cursors_[i] == ends_[i]) continue;
      const std::uint64_t t = logs_[i]->ring[cursors_[i] % StatLog::kSize].time;
      if (t < best_time) best = i, best_time = t;
    }
    if (best == n) break;
    folded_.add(logs_[best]->ring[cursors_[best]++ % StatLog::kSize].change);
    peaks_.raise(folded_);
  }
  for (std::size_t i = 0; i < n; ++i) logs_[i]->tail.store(cursors_[i], std::memory_order_release);
}

}  // namespace gpumem::engine
