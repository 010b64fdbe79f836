// Pages created and mapped ahead of need, on a thread of their own (the CUDA backend's growth).
//
// Every physical page costs its creator ~45 us of driver calls (cuMemCreate, cuMemMap, cuMemSetAccess;
// BENCHMARKS.md), and a program's first steps grow by thousands of pages: on the allocating thread
// that time delays the kernels it launches, while the same calls on another thread slow its launches by
// a few percent only (bench/gpu/vmm_overlap.cu). So after a growth at the top of a reserved range the
// engine names where the next one will likely go (prepare), a worker creates pages there, maps them and
// grants access, and the next chunk asked for at that address takes them already mapped (take).
//
// Contract:
//  - prepare(va, bytes): a run of bytes/page pages at [va, va+bytes). Ignored while a run is under way
//    or pages wait at va; pages waiting elsewhere (growth went on without them) are unmapped there by
//    the worker and used for the new run. The addresses must be reserved and mapped by no one else
//    until the pages are taken or cleared.
//  - take(va, n): waits for a run under way; the first up to n waiting pages if they start at va, in
//    address order, each still mapped there with access granted (the caller owns them from then on);
//    none otherwise.
//  - clear(va, bytes): before anyone else maps in [va, va+bytes) or gives those addresses back: the
//    waiting pages there are unmapped (when they are the run's front, the rest waits on) and kept as
//    spares, unmapped, for the next run or take_spare() (each saves a later cuMemCreate).
//  - take_spare(n): up to n spare pages (unmapped; the caller owns them).
//  - give_back(): the worker unmaps and releases every waiting and spare page (the program stopped
//    growing); like prepare(), ignored while a run is under way.
//  - drop(): every waiting and spare page unmapped and released (memory given back, a failed create,
//    the end).
//  - Idle: when nothing was made, taken or cleared for `idle` (default 2 s: the program's growth
//    has ended, e.g. after its first steps), the worker gives back what it holds as give_back() would,
//    so pages made ahead do not stay device memory no reserved count shows.
//  - Pages waiting or spare are device memory the allocator's reserved count does not show until
//    taken: one run at most (the caller sizes it; the CUDA backend caps it at 64 MiB) and as many spares.
// Thread-safety: prepare, take, clear and drop are called one at a time (the backend's calls are
// serialized by the engine); the worker's driver calls touch only its own pages and addresses. A forked
// child never waits for its parent's worker.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "gpumem/backend.hpp"

namespace gpumem {

// The driver calls the worker makes; false on failure (the run then stops, nothing is left half done).
class AheadDriver {
 public:
  virtual ~AheadDriver() = default;
  virtual void on_worker_start() {}  // e.g. make the context current on the worker
  virtual bool create(std::uint64_t* handle, std::size_t page) = 0;
  virtual bool map(DevicePtr va, std::size_t page, std::uint64_t handle) = 0;
  virtual bool set_access(DevicePtr va, std::size_t bytes) = 0;
  virtual void unmap(DevicePtr va, std::size_t page) = 0;
  virtual void release(std::uint64_t handle) = 0;
};

class MapAhead {
 public:
  static constexpr std::chrono::milliseconds kIdle{2000};
  MapAhead(AheadDriver& driver, std::size_t page, std::chrono::milliseconds idle = kIdle)
      : driver_(driver), page_(page), idle_after_(idle) {}
  ~MapAhead();
  MapAhead(const MapAhead&) = delete;
  MapAhead& operator=(const MapAhead&) = delete;

  void prepare(DevicePtr va, std::size_t bytes);
  std::vector<std::uint64_t> take(DevicePtr va, std::size_t n);
  std::vector<std::uint64_t> take_spare(std::size_t n);
  void give_back();
  std::size_t clear(DevicePtr va, std::size_t bytes);  // returns the pages it unmapped
  void drop();

  std::size_t page() const noexcept { return page_; }
  // Waiting pages, and those plus the spares (after a run under way completes).
  std::size_t waiting();
  std::size_t held();
  // Pages the worker made and what its driver calls took, in all (any thread may read them).
  std::uint64_t pages_made() const noexcept { return pages_made_.load(std::memory_order_relaxed); }
  std::uint64_t worker_ns() const noexcept { return worker_ns_.load(std::memory_order_relaxed); }
  // Pages made ahead and unmapped again unused (mispredictions; most are used again as spares).
  std::uint64_t pages_unused() const noexcept { return pages_unused_.load(std::memory_order_relaxed); }
  // Pages held now (waiting, spare or being made) and at most so far: memory no reserved count shows.
  std::uint64_t pages_held() const noexcept { return held_pages_.load(std::memory_order_relaxed); }
  std::uint64_t pages_held_peak() const noexcept { return held_peak_.load(std::memory_order_relaxed); }

 private:
  struct Job {
    DevicePtr va = 0;  // the run to make
    std::size_t pages = 0;
    DevicePtr old_va = 0;  // the pages that waited elsewhere, to unmap first (now in spare_)
    std::size_t old_pages = 0;
    bool give_back = false;  // then no run: the old pages and every spare are released
  };
  void run_worker();
  // With lock held and no run under way: hands `job` (whose old pages are those waiting now) to the worker.
  void start(std::unique_lock<std::mutex>& lock, const Job& job);
  void begin(const Job& job);  // start() without the hand-over: the worker asking itself
  // With lock held, on the worker: true once it gave itself the job of giving back what lay idle;
  // else waits a while for a job.
  bool idle_give_back(std::unique_lock<std::mutex>& lock);
  void make_run(const Job& job);
  // With lock held: waits until no run is under way.
  void wait_idle(std::unique_lock<std::mutex>& lock);
  void drop_locked();
  bool forked() const noexcept;
  void count_held(std::int64_t pages) noexcept;

  AheadDriver& driver_;
  const std::size_t page_;
  const std::chrono::milliseconds idle_after_;
  std::chrono::steady_clock::time_point last_use_{};  // a run made, a take or a clear
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::thread worker_;
  std::atomic<int> owner_pid_{0};  // the process whose worker it is (0: none yet)
  bool stopping_ = false;
  bool busy_ = false;               // a run asked for or under way
  Job job_;                           // the run asked for
  DevicePtr va_ = 0;                  // where the waiting pages start
  std::vector<std::uint64_t> pages_;  // waiting, in address order from va_
  std::vector<std::uint64_t> spare_;  // made, mapped nowhere
  std::size_t last_run_ = 0;          // pages of the last run asked for: the most spares kept
  std::atomic<std::uint64_t> pages_made_{0}, worker_ns_{0}, pages_unused_{0}, held_pages_{0}, held_peak_{0};
};

}  // namespace gpumem
