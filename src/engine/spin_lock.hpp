// A small test-and-test-and-set lock for the per-stream pools: uncontended lock+unlock costs a few
// nanoseconds, far less than std::mutex, and pools are mostly touched by one thread.
#pragma once
#include <atomic>
#include <thread>

namespace gpumem::engine {

class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0;; ++spins) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins > 64) std::this_thread::yield();
      }
    }
  }
  // Tests before it writes: threads that find it held leave its cache line shared.
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace gpumem::engine
