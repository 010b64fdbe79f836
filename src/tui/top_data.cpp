#include "tui/top_data.hpp"

#include <unistd.h>

#include <cmath>
#include <set>

#include "control/client.hpp"

namespace gpumem::tui {
namespace {

using Clock = std::chrono::steady_clock;

double uptime_s() {
  double up = 0;
  if (FILE* f = std::fopen("/proc/uptime", "r")) {
    if (std::fscanf(f, "%lf", &up) != 1) up = 0;
    std::fclose(f);
  }
  return up;
}

void push(std::deque<float>& d, float v) {
  d.push_back(v);
  while (d.size() > TopCollector::kHistoryPoints) d.pop_front();
}

// The control channel's reports for one process on one GPU: by UUID when the process names its device
// that way, otherwise the only device of a process that NVML sees on one GPU.
const control::DeviceReport* report_for(const control::ProcessReport& r, const monitor::GpuSample& g, int gpu_rows) {
  for (const auto& d : r.devices)
    if (g.uuid && d.device_key == *g.uuid) return &d;
  if (r.devices.size() == 1 && gpu_rows == 1) return &r.devices[0];
  for (const auto& d : r.devices)
    if (d.device == static_cast<int>(g.index)) return &d;
  return nullptr;
}

}  // namespace

void Gatherer::gather(monitor::Sampler& sampler, TopData& next, const TopData* prev) {
  next.sample = sampler.sample();
  const auto now = Clock::now();
  const double period_s = prev_at_ == Clock::time_point{} ? 0 : std::chrono::duration<double>(now - prev_at_).count();
  prev_at_ = now;
  const double ticks_per_s = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double up = uptime_s();
  if (scan_holders_ && now - holders_at_ >= std::chrono::seconds(5)) {
    holders_ = monitor::scan_device_holders(monitor::device_dir()).holders;
    holders_at_ = now;
  }
  std::map<int, unsigned long long> ticks;
  std::map<int, std::optional<monitor::ProcInfo>> procs;
  auto proc_of = [&](int pid) -> const std::optional<monitor::ProcInfo>& {
    auto it = procs.find(pid);
    if (it == procs.end()) it = procs.emplace(pid, monitor::read_process(pid)).first;
    return it->second;
  };
  auto fill = [&](ProcRow& row) {
    row.proc = proc_of(row.pid);
    if (!row.proc) return;
    ticks[row.pid] = row.proc->cpu_ticks;
    auto p = prev_ticks_.find(row.pid);
    if (p != prev_ticks_.end() && period_s > 0 && row.proc->cpu_ticks >= p->second)
      row.cpu_percent = 100.0 * static_cast<double>(row.proc->cpu_ticks - p->second) / ticks_per_s / period_s;
    if (up > 0) row.age_s = std::max(0.0, up - static_cast<double>(row.proc->start_time) / ticks_per_s);
  };
  std::set<std::pair<unsigned, int>> listed;
  for (const monitor::GpuSample& g : next.sample.gpus) {
    if (!g.processes) continue;
    for (const monitor::ProcessSample& p : *g.processes) {
      ProcRow row;
      row.gpu = g.index;
      row.pid = static_cast<int>(p.pid);
      row.type = p.compute && p.graphics ? "C+G" : p.graphics ? "G" : "C";
      row.gpu_bytes = p.used_bytes;
      row.sm_percent = p.sm_percent;
      fill(row);
      row.kind = row.proc ? RowKind::kContext : RowKind::kGone;
      listed.insert({g.index, row.pid});
      next.rows.push_back(std::move(row));
    }
  }
  for (const monitor::DeviceHolder& h : holders_) {
    for (const monitor::GpuSample& g : next.sample.gpus) {
      if (!g.minor || *g.minor != h.minor || listed.count({g.index, h.pid})) continue;
      ProcRow row;
      row.gpu = g.index;
      row.pid = h.pid;
      row.type = "-";
      row.kind = RowKind::kNoContext;
      fill(row);
      if (!row.proc) continue;  // ended since the scan
      listed.insert({g.index, h.pid});
      next.rows.push_back(std::move(row));
    }
  }
  prev_ticks_ = std::move(ticks);
  if (use_control_ && !next.rows.empty()) {  // no GPU process, no socket to look for
    try {
      std::map<int, int> rows_of_pid;
      for (const ProcRow& r : next.rows) ++rows_of_pid[r.pid];
      for (const control::ProcessRef& ref : control::list_processes(geteuid() == 0)) {
        if (!rows_of_pid.count(ref.pid)) continue;  // a gpumem process on no GPU here: its stats fill no row
        control::ProcessReport rep;
        try {
          rep = control::stats(ref.pid, std::chrono::milliseconds(300));
        } catch (const control::ControlError& e) {
          continue;  // ended or busy: its columns stay "-" this round
        }
        for (ProcRow& row : next.rows) {
          if (row.pid != ref.pid) continue;
          const monitor::GpuSample* g = nullptr;
          for (const auto& s : next.sample.gpus)
            if (s.index == row.gpu) g = &s;
          const control::DeviceReport* d = g ? report_for(rep, *g, rows_of_pid[row.pid]) : nullptr;
          if (!d) continue;
          row.alloc_bytes = d->allocated_bytes;
          row.reserved_bytes = d->reserved_bytes;
          row.peak_bytes = d->allocated_peak_bytes;
          if (d->limit_bytes > 0) row.limit_bytes = d->limit_bytes;
          row.control_device = d->device;
          next.alloc_live[row.gpu] += d->allocated_bytes;
          next.alloc_cached[row.gpu] += d->reserved_bytes - d->allocated_bytes;
        }
      }
    } catch (const std::exception& e) {
      next.control_note = e.what();
    }
  }
  if (prev) next.history = prev->history;
  for (const monitor::GpuSample& g : next.sample.gpus) {
    GpuHistory& h = next.history[g.index];
    float mem = g.memory_used && g.memory_total && *g.memory_total ? float(double(*g.memory_used) / double(*g.memory_total)) : NAN;
    push(h.memory, mem);
    push(h.util, g.util_gpu ? float(*g.util_gpu / 100.0) : NAN);
  }
  next.generation = prev ? prev->generation + 1 : 1;
}

TopCollector::TopCollector(monitor::Sampler sampler, std::chrono::milliseconds period, bool use_control)
    : sampler_(std::move(sampler)), gatherer_(use_control), period_(period) {
  auto first = std::make_shared<TopData>();
  gatherer_.gather(sampler_, *first, nullptr);  // the first screen has data
  latest_ = first;
  thread_ = std::thread([this] { run(); });
}

TopCollector::~TopCollector() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();  // the caller leaks a collector stop_within() could not stop
}

bool TopCollector::stop_within(std::chrono::milliseconds grace) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    stop_ = true;
    cv_.notify_all();
    if (!cv_.wait_for(lock, grace, [this] { return ended_; })) return false;
  }
  thread_.join();
  return true;
}

std::shared_ptr<const TopData> TopCollector::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return latest_;
}

std::chrono::milliseconds TopCollector::stalled_for() const {
  long long started = sample_started_ns_.load();
  if (!started) return std::chrono::milliseconds(0);
  auto running = Clock::now().time_since_epoch() - std::chrono::nanoseconds(started);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(running);
  return ms > period_ ? ms : std::chrono::milliseconds(0);
}

void TopCollector::refresh_now() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_ = true;
  }
  cv_.notify_all();
}

void TopCollector::run() {
  for (;;) {
    std::shared_ptr<const TopData> prev;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait_for(lock, period_, [this] { return stop_ || wake_; });
      if (stop_) {
        ended_ = true;
        cv_.notify_all();
        return;
      }
      wake_ = false;
      prev = latest_;
    }
    auto next = std::make_shared<TopData>();
    sample_started_ns_.store(Clock::now().time_since_epoch().count());
    gatherer_.gather(sampler_, *next, prev.get());
    sample_started_ns_.store(0);
    std::lock_guard<std::mutex> lock(mutex_);
    latest_ = std::move(next);
  }
}

}  // namespace gpumem::tui
