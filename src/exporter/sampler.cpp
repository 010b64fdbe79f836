#include "exporter/sampler.hpp"

#include <cmath>
#include <exception>

#include "nvml/library.hpp"

namespace gpumem::exporter {

Sampler::Sampler(CollectFn collect, std::chrono::milliseconds interval)
    : collect_(std::move(collect)), interval_(interval) {}

Sampler::~Sampler() { stop(); }

void Sampler::start() {
  std::lock_guard lock(mutex_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void Sampler::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Sampler::run() {
  auto next = std::chrono::steady_clock::now();
  for (;;) {
    std::shared_ptr<const Snapshot> sample;
    try {
      sample = std::make_shared<const Snapshot>(collect_());
    } catch (const std::exception&) {
      // Counted below as a failed sample; the previous snapshot stays served and ages.
    }
    {
      std::unique_lock lock(mutex_);
      if (sample) {
        latest_ = sample;
        latest_at_ = std::chrono::steady_clock::now();
        ++counters_.samples;
        counters_.nvml_errors += sample->health.nvml_errors;
        counters_.control_errors += sample->health.control_errors;
      } else {
        ++counters_.nvml_errors;
      }
      // Fixed rate, but never a burst of catch-up samples after a slow one.
      next = std::max(next + interval_, std::chrono::steady_clock::now());
      if (wake_.wait_until(lock, next, [this] { return stopping_; })) return;
    }
  }
}

std::shared_ptr<const Snapshot> Sampler::latest() const {
  std::lock_guard lock(mutex_);
  return latest_;
}

ExporterCounters Sampler::counters() const {
  ExporterCounters c;
  {
    std::lock_guard lock(mutex_);
    c = counters_;
  }
  c.now_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return c;
}

void Sampler::record_scrape(double seconds) noexcept {
  std::lock_guard lock(mutex_);
  ++counters_.scrapes;
  counters_.last_scrape_seconds = seconds;
}

double Sampler::seconds_since_last_sample() const {
  std::lock_guard lock(mutex_);
  if (!latest_) return INFINITY;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - latest_at_).count();
}

Sampler::CollectFn nvml_collector(CollectOptions options) {
  auto nvml = std::make_shared<std::shared_ptr<nvml::Nvml>>();
  return [nvml, options]() {
    std::string error;
    if (!*nvml) {
      try {
        *nvml = nvml::Nvml::open();
      } catch (const nvml::NvmlUnavailableError& e) {
        error = e.what();
      }
    }
    Snapshot s = collect_snapshot(nvml->get(), options);
    s.health.nvml_error = error;
    return s;
  };
}

}  // namespace gpumem::exporter
