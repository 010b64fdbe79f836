// What `gpumem top` and the one-shot summary show, gathered off the screen thread. Contract: a
// TopCollector samples NVML (monitor::Sampler), /proc and the control channel on its own thread once
// per period and publishes a complete TopData; latest() never blocks on NVML, so a GPU that stops
// answering leaves the screen live (`stalled_for` says how long the running sample has taken).
#pragma once
#include <gpumem/monitor.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "monitor/procfs.hpp"

namespace gpumem::tui {

enum class RowKind { kContext, kNoContext, kGone };  // as in `gpumem ps`

struct ProcRow {
  unsigned gpu = 0;
  int pid = 0;
  RowKind kind = RowKind::kContext;
  std::string type;  // "C", "G", "C+G", "-"
  std::optional<unsigned long long> gpu_bytes;
  std::optional<monitor::ProcInfo> proc;
  std::optional<unsigned> sm_percent;         // NVML's per-process SM utilization, where it has one
  std::optional<double> cpu_percent;          // over the last period
  std::optional<double> age_s;                // since the process started
  // From the control channel, for gpumem processes only.
  std::optional<long long> alloc_bytes, reserved_bytes, peak_bytes, limit_bytes;
  std::optional<int> control_device;  // the device number inside the process (for `l`)
};

struct GpuHistory {
  std::deque<float> memory, util;  // fractions 0..1, newest last; NaN where unknown
};

struct TopData {
  monitor::SampleSet sample;
  std::vector<ProcRow> rows;
  std::map<unsigned, GpuHistory> history;          // by NVML index
  std::map<unsigned, long long> alloc_live, alloc_cached;  // sums over gpumem processes per GPU
  std::string control_note;  // why control data is missing, if it is
  unsigned long long generation = 0;
};

// One round of gathering: the sample, /proc details, device-node holders (rescanned every 5 s: the
// scan reads every process's fd table; scan_holders=false skips it), control-channel stats. Keeps what
// %CPU and history need.
class Gatherer {
 public:
  explicit Gatherer(bool use_control, bool scan_holders = true)
      : use_control_(use_control), scan_holders_(scan_holders) {}
  void gather(monitor::Sampler& sampler, TopData& next, const TopData* prev);

 private:
  bool use_control_, scan_holders_;
  std::map<int, unsigned long long> prev_ticks_;
  std::chrono::steady_clock::time_point prev_at_{}, holders_at_{};
  std::vector<monitor::DeviceHolder> holders_;
};

class TopCollector {
 public:
  static constexpr size_t kHistoryPoints = 600;
  TopCollector(monitor::Sampler sampler, std::chrono::milliseconds period, bool use_control);
  ~TopCollector();
  TopCollector(const TopCollector&) = delete;
  TopCollector& operator=(const TopCollector&) = delete;

  std::shared_ptr<const TopData> latest() const;
  // How long the sample in progress has been running; zero when none is overdue.
  std::chrono::milliseconds stalled_for() const;
  void refresh_now();  // after an action: sample again without waiting for the period
  // Asks the sampling thread to stop and waits up to `grace` for it to end. False when its sample is
  // still inside the driver: the caller then leaks the collector (its thread ends after that sample and
  // takes no other), as joining could wait for ever.
  bool stop_within(std::chrono::milliseconds grace);

 private:
  void run();
  monitor::Sampler sampler_;
  Gatherer gatherer_;
  std::chrono::milliseconds period_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::shared_ptr<const TopData> latest_;
  std::atomic<long long> sample_started_ns_{0};  // steady clock; 0 when idle
  bool stop_ = false, wake_ = false, ended_ = false;
  std::thread thread_;
};


}  // namespace gpumem::tui
