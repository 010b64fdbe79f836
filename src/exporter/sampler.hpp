// Background sampling, so a scrape never waits on NVML. Contract: a Sampler calls its collect
// function once per interval on its own thread (the first time at start()); latest() hands out the
// newest Snapshot without blocking on a sample in progress (a shared_ptr copy under a short lock).
// The collect function must not throw (collect_snapshot() does not); if it does anyway, the sample is
// dropped and counted, and the sampler keeps going. stop() (or the destructor) joins the thread.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "exporter/collect.hpp"
#include "exporter/render.hpp"

namespace gpumem::exporter {

class Sampler {
 public:
  using CollectFn = std::function<Snapshot()>;
  Sampler(CollectFn collect, std::chrono::milliseconds interval);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  void start();
  void stop() noexcept;
  std::chrono::milliseconds interval() const noexcept { return interval_; }

  std::shared_ptr<const Snapshot> latest() const;
  ExporterCounters counters() const;                 // now_unix set to the current time
  void record_scrape(double seconds) noexcept;       // a scrape of /metrics finished
  double seconds_since_last_sample() const;          // +inf before the first one

 private:
  void run();
  CollectFn collect_;
  std::chrono::milliseconds interval_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::shared_ptr<const Snapshot> latest_;
  std::chrono::steady_clock::time_point latest_at_{};
  ExporterCounters counters_;
  std::thread thread_;
};

// The exporter's collect function: opens NVML on first use and, while it is missing or fails to
// initialise, again at every sample (a driver installed or loaded later is picked up without a
// restart); then collect_snapshot() over it. NVML's failure goes into the snapshot's health.
Sampler::CollectFn nvml_collector(CollectOptions options);

}  // namespace gpumem::exporter
