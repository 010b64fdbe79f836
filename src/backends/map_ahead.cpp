#include "backends/map_ahead.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace gpumem {
MapAhead::~MapAhead() {
  if (forked()) {  // the worker is the parent's (and may have held the lock at the fork): never joined,
    new (&worker_) std::thread();  // the child's copy of its handle is forgotten (exit follows)
    return;
  }
  std::unique_lock lock(mutex_);
  wait_idle(lock);
  drop_locked();
  stopping_ = true;
  lock.unlock();
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void MapAhead::count_held(std::int64_t pages) noexcept {
  const std::uint64_t now = held_pages_.fetch_add(std::uint64_t(pages), std::memory_order_relaxed) + std::uint64_t(pages);
  std::uint64_t peak = held_peak_.load(std::memory_order_relaxed);
  while (now > peak && !held_peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

bool MapAhead::forked() const noexcept {
  const int owner = owner_pid_.load(std::memory_order_relaxed);
  return owner && int(getpid()) != owner;
}

void MapAhead::wait_idle(std::unique_lock<std::mutex>& lock) {
  // wait_for, not wait: wait(unique_lock&) needs a newer libstdc++ than the packages promise.
  while (busy_) idle_.wait_for(lock, std::chrono::milliseconds(100));
}

void MapAhead::prepare(DevicePtr va, std::size_t bytes) {
  const std::size_t pages = bytes / page_;
  if (!pages || !va || forked()) return;
  std::unique_lock lock(mutex_);
  if (busy_ || stopping_) return;
  if (!pages_.empty() && va_ == va) return;  // what waits is already there
  if (!worker_.joinable()) {
    owner_pid_ = int(getpid());  // set before the worker exists
    worker_ = std::thread([this] { run_worker(); });
  }
  last_run_ = pages;
  start(lock, Job{va, pages, va_, pages_.size(), false});
}

void MapAhead::give_back() {
  if (forked()) return;
  std::unique_lock lock(mutex_);
  if (busy_ || stopping_ || (pages_.empty() && spare_.empty())) return;
  start(lock, Job{0, 0, va_, pages_.size(), true});
}

void MapAhead::start(std::unique_lock<std::mutex>& lock, const Job& job) {
  begin(job);
  lock.unlock();
  wake_.notify_one();
}

void MapAhead::begin(const Job& job) {
  // Pages waiting (growth went on without them) become spares; the worker unmaps them first. Nothing
  // maps at their old addresses meanwhile: take() and clear() wait for the worker.
  busy_ = true;
  job_ = job;
  pages_unused_.fetch_add(pages_.size(), std::memory_order_relaxed);
  spare_.insert(spare_.end(), pages_.begin(), pages_.end());
  pages_.clear();
}

bool MapAhead::idle_give_back(std::unique_lock<std::mutex>& lock) {
  auto wait = std::chrono::milliseconds(100);
  if (!busy_ && (!pages_.empty() || !spare_.empty())) {
    const auto idle_for = std::chrono::steady_clock::now() - last_use_;
    if (idle_for >= idle_after_) {
      begin(Job{0, 0, va_, pages_.size(), true});
      return true;
    }
    wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(idle_after_ - idle_for) + std::chrono::milliseconds(1));
  }
  wake_.wait_for(lock, wait);
  return false;
}

void MapAhead::run_worker() {
  driver_.on_worker_start();
  std::unique_lock lock(mutex_);
  while (true) {
    const bool asked = busy_ && (job_.pages || job_.give_back);
    if (stopping_) return;
    if (!asked && !idle_give_back(lock)) continue;
    const Job job = job_;
    job_ = Job{};
    lock.unlock();
    make_run(job);  // publishes under the lock
    lock.lock();
    busy_ = false;
    idle_.notify_all();
  }
}

void MapAhead::make_run(const Job& job) {
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < job.old_pages; ++i) driver_.unmap(job.old_va + i * page_, page_);
  if (job.give_back) {
    std::vector<std::uint64_t> spares;
    {
      std::lock_guard lock(mutex_);
      spares.swap(spare_);
    }
    for (std::uint64_t h : spares) driver_.release(h);
    count_held(-std::int64_t(spares.size()));
    return;
  }
  std::vector<std::uint64_t> made;
  {
    std::lock_guard lock(mutex_);  // the spare pages first: made before, unmapped since
    const std::size_t n = std::min(job.pages, spare_.size());
    made.assign(spare_.end() - std::ptrdiff_t(n), spare_.end());
    spare_.resize(spare_.size() - n);
  }
  const std::size_t reused = made.size();
  bool ok = true;
  while (ok && made.size() < job.pages) {
    std::uint64_t h = 0;
    ok = driver_.create(&h, page_);
    if (ok) made.push_back(h);
    if (ok) count_held(1);
  }
  std::size_t mapped = 0;
  while (ok && mapped < made.size()) {
    ok = driver_.map(job.va + mapped * page_, page_, made[mapped]);
    if (ok) ++mapped;
  }
  ok = ok && driver_.set_access(job.va, made.size() * page_);
  if (!ok) {  // device full or refused: nothing waits, the program's own growth makes its pages
    for (std::size_t i = 0; i < mapped; ++i) driver_.unmap(job.va + i * page_, page_);
    for (std::uint64_t h : made) driver_.release(h);
    count_held(-std::int64_t(made.size()));
    made.clear();
  }
  worker_ns_.fetch_add(std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::steady_clock::now() - t0).count()),
                       std::memory_order_relaxed);
  if (ok) pages_made_.fetch_add(made.size() - reused, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  va_ = job.va;
  pages_ = std::move(made);
  last_use_ = std::chrono::steady_clock::now();  // idle counts from when the pages are ready
}

std::vector<std::uint64_t> MapAhead::take(DevicePtr va, std::size_t n) {
  if (forked()) return {};
  std::unique_lock lock(mutex_);
  if (!busy_ && pages_.empty()) return {};
  wait_idle(lock);
  if (pages_.empty() || va_ != va) return {};
  last_use_ = std::chrono::steady_clock::now();
  n = std::min(n, pages_.size());
  std::vector<std::uint64_t> out(pages_.begin(), pages_.begin() + std::ptrdiff_t(n));
  pages_.erase(pages_.begin(), pages_.begin() + std::ptrdiff_t(n));
  va_ += n * page_;
  count_held(-std::int64_t(n));
  return out;
}

std::vector<std::uint64_t> MapAhead::take_spare(std::size_t n) {
  if (forked()) return {};
  std::lock_guard lock(mutex_);  // the worker takes from spare_ only under the lock too
  n = std::min(n, spare_.size());
  std::vector<std::uint64_t> out(spare_.end() - std::ptrdiff_t(n), spare_.end());
  spare_.resize(spare_.size() - n);
  count_held(-std::int64_t(n));
  return out;
}

std::size_t MapAhead::clear(DevicePtr va, std::size_t bytes) {
  if (forked()) return 0;
  std::unique_lock lock(mutex_);
  if (!busy_ && pages_.empty()) return 0;
  wait_idle(lock);
  const DevicePtr end = va_ + pages_.size() * page_;
  if (pages_.empty() || va >= end || va_ >= va + bytes) return 0;
  last_use_ = std::chrono::steady_clock::now();
  // Unmapped and kept as spares. From the front (the engine grew there with other pages) the rest
  // still lies where growth goes next; otherwise all of them go.
  std::size_t n = pages_.size();
  if (va <= va_ && va + bytes < end) n = (va + bytes - va_ + page_ - 1) / page_;
  for (std::size_t i = 0; i < n; ++i) driver_.unmap(va_ + i * page_, page_);
  spare_.insert(spare_.end(), pages_.begin(), pages_.begin() + std::ptrdiff_t(n));
  pages_.erase(pages_.begin(), pages_.begin() + std::ptrdiff_t(n));
  va_ += n * page_;
  pages_unused_.fetch_add(n, std::memory_order_relaxed);
  while (spare_.size() > last_run_) {  // no more spares than one run: they are memory nothing shows
    driver_.release(spare_.back());
    spare_.pop_back();
    count_held(-1);
  }
  return n;
}

void MapAhead::drop() {
  if (forked()) return;
  std::unique_lock lock(mutex_);
  wait_idle(lock);
  drop_locked();
}

void MapAhead::drop_locked() {
  pages_unused_.fetch_add(pages_.size(), std::memory_order_relaxed);
  for (std::size_t i = 0; i < pages_.size(); ++i) driver_.unmap(va_ + i * page_, page_);
  for (std::uint64_t h : pages_) driver_.release(h);
  for (std::uint64_t h : spare_) driver_.release(h);
  count_held(-std::int64_t(pages_.size() + spare_.size()));
  pages_.clear();
  spare_.clear();
}

std::size_t MapAhead::held() {
  if (forked()) return 0;
  std::unique_lock lock(mutex_);
  wait_idle(lock);
  return pages_.size() + spare_.size();
}

std::size_t MapAhead::waiting() {
  if (forked()) return 0;
  std::unique_lock lock(mutex_);
  wait_idle(lock);
  return pages_.size();
}

}  // namespace gpumem
