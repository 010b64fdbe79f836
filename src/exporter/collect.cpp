#include "exporter/collect.hpp"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include "control/client.hpp"
#include "exporter/kubernetes.hpp"
#include "monitor/cuda_order.hpp"
#include "monitor/ps.hpp"

namespace gpumem::exporter {
namespace {

double unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

GpuMetrics gpu_metrics(const monitor::GpuSample& g) {
  GpuMetrics m;
  m.index = g.index;
  m.uuid = g.uuid.value_or("");
  m.pci_bus_id = g.bus_id.value_or("");
  m.model_name = g.name.value_or("");
  m.minor = g.minor;
  m.up = g.error.empty();
  m.fb_total_bytes = g.memory_total;
  m.fb_used_bytes = g.memory_used;
  m.fb_free_bytes = g.memory_free;
  m.fb_reserved_bytes = g.memory_reserved;
  m.gpu_util_percent = g.util_gpu;
  m.mem_copy_util_percent = g.util_memory;
  m.sm_clock_mhz = g.clock_sm_mhz;
  m.mem_clock_mhz = g.clock_memory_mhz;
  m.gpu_temp_c = g.temperature;
  m.memory_temp_c = g.memory_temperature;
  if (g.power_mw) m.power_watts = *g.power_mw / 1000.0;
  m.total_energy_mj = g.energy_mj;
  m.pcie_replays = g.pcie_replays;
  m.last_xid = g.last_xid;
  m.remapped_rows_correctable = g.remapped_rows_correctable;
  m.remapped_rows_uncorrectable = g.remapped_rows_uncorrectable;
  if (g.row_remap_failure) m.row_remap_failure = *g.row_remap_failure ? 1 : 0;
  return m;
}

void describe(ProcessMetrics& p, const monitor::ProcInfo& info, const CollectOptions& options) {
  p.user = info.user;
  p.command = info.comm;
  p.container = info.container;
  if (p.container.empty()) return;
  PodIdentity pod = read_pod_identity(p.pid, options.proc_dir);
  p.pod_uid = pod.uid;
  p.pod = pod.name;
  p.namespace_ = pod.namespace_;
}

// The GPU a control-channel device report is about. CUDA backends name it "cuda:ENTRY", ENTRY being
// what CUDA_VISIBLE_DEVICES maps the process's device to (a GPU-UUID or its prefix, or CUDA's index):
// resolved with CUDA's rules over the GPUs NVML lists. Else the only GPU NVML shows the process on, else
// its own device number.
}  // namespace

unsigned gpu_of_report(const control::DeviceReport& d, int pid, const Snapshot& s) {
  if (d.device_key.rfind("cuda:", 0) == 0 && !s.gpus.empty()) {
    std::vector<monitor::CudaGpu> gpus;
    for (const GpuMetrics& g : s.gpus) gpus.push_back({g.index, g.uuid, g.pci_bus_id, g.model_name, std::nullopt});
    const std::string entry = d.device_key.substr(5);
    const monitor::CudaMapping m = monitor::cuda_order(gpus, nullptr, entry.c_str());
    if (m.visible.size() == 1) return m.visible[0];
  }
  std::set<unsigned> on;
  for (const ProcessMetrics& p : s.processes)
    if (p.pid == pid && p.kind == ProcessKind::kContext) on.insert(p.gpu);
  return on.size() == 1 ? *on.begin() : static_cast<unsigned>(d.device);
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

Snapshot snapshot_from(const monitor::SampleSet& sample, const monitor::HolderScan& holders, const CollectOptions& options) {
  Snapshot s;
  s.hostname = host_name();
  s.health.nvml_up = true;
  s.health.taken_at_unix = unix_seconds(sample.taken_at);
  std::map<unsigned, unsigned> gpu_of_minor;
  std::set<std::pair<unsigned, int>> listed;
  std::map<int, std::optional<monitor::ProcInfo>> procs;
  auto proc_of = [&](int pid) -> const std::optional<monitor::ProcInfo>& {
    auto it = procs.find(pid);
    if (it == procs.end()) it = procs.emplace(pid, monitor::read_process(pid)).first;
    return it->second;
  };
  for (const monitor::GpuSample& g : sample.gpus) {
    s.gpus.push_back(gpu_metrics(g));
    if (!g.error.empty()) ++s.health.nvml_errors;
    if (g.minor) gpu_of_minor[*g.minor] = g.index;
    if (!g.processes) {
      if (g.error.empty() && options.processes) ++s.health.nvml_errors;
      continue;
    }
    for (const monitor::ProcessSample& ps : *g.processes) {
      ProcessMetrics p;
      p.gpu = g.index;
      p.pid = static_cast<int>(ps.pid);
      p.used_bytes = ps.used_bytes;
      listed.insert({p.gpu, p.pid});
      const auto& info = proc_of(p.pid);
      p.kind = info ? ProcessKind::kContext : ProcessKind::kExited;
      if (info) describe(p, *info, options);
      s.processes.push_back(std::move(p));
    }
  }
  s.health.unreadable_processes = holders.unreadable;
  for (const monitor::DeviceHolder& h : holders.holders) {
    auto gpu = gpu_of_minor.find(h.minor);
    if (gpu == gpu_of_minor.end() || !listed.insert({gpu->second, h.pid}).second) continue;
    const auto& info = proc_of(h.pid);
    if (!info || monitor::is_driver_daemon(*info)) continue;  // exited since the scan, or nvidia-persistenced
    ProcessMetrics p;
    p.gpu = gpu->second;
    p.pid = h.pid;
    p.kind = ProcessKind::kNoContext;
    describe(p, *info, options);
    s.processes.push_back(std::move(p));
  }
  return s;
}

namespace {
struct Asked {
  std::optional<control::ProcessReport> report;
  bool error = false;  // no answer (a process that exited meanwhile is not an error)
};

// Every process asked at once (up to kAtOnce): a stopped or busy one costs its timeout once per sample,
// not once more for each process after it (20 stopped processes made every sample 6 s late).
std::vector<Asked> ask_all(const std::vector<control::ProcessRef>& refs, std::chrono::milliseconds timeout) {
  constexpr std::size_t kAtOnce = 32;
  std::vector<Asked> out(refs.size());
  for (std::size_t from = 0; from < refs.size(); from += kAtOnce) {
    std::vector<std::thread> threads;
    for (std::size_t i = from; i < std::min(refs.size(), from + kAtOnce); ++i) {
      const auto ask = [&out, &refs, timeout, i] {
        try {
          out[i].report = control::stats(refs[i].pid, timeout);
        } catch (const control::ControlError& e) {
          out[i].error = e.kind() != control::FailureKind::gone;
        } catch (const std::exception&) {
          out[i].error = true;
        }
      };
      try {
        threads.emplace_back(ask);
      } catch (const std::system_error&) {  // no thread to be had: asked here
        ask();
      }
    }
    for (std::thread& t : threads) t.join();
  }
  return out;
}
}  // namespace

void add_allocators(Snapshot& s, const CollectOptions& options) {
  const std::vector<control::ProcessRef> refs = control::list_processes(true);
  const std::vector<Asked> answers = ask_all(refs, options.control_timeout);
  for (std::size_t i = 0; i < refs.size(); ++i) {
    const control::ProcessRef& ref = refs[i];
    if (answers[i].error) ++s.health.control_errors;
    if (!answers[i].report) continue;
    const control::ProcessReport& report = *answers[i].report;
    std::string command;
    for (const ProcessMetrics& p : s.processes)
      if (p.pid == ref.pid) command = p.command;
    if (command.empty())
      if (auto info = monitor::read_process(ref.pid)) command = info->comm;
    for (const control::DeviceReport& d : report.devices) {
      AllocatorMetrics a;
      a.gpu = gpu_of_report(d, ref.pid, s);
      a.pid = ref.pid;
      a.command = command;
      a.allocated_bytes = d.allocated_bytes;
      a.reserved_bytes = d.reserved_bytes;
      a.peak_allocated_bytes = d.allocated_peak_bytes;
      a.requested_bytes = d.requested_bytes;
      a.largest_free_bytes = d.largest_free_bytes;
      if (d.limit_bytes > 0) a.limit_bytes = d.limit_bytes;
      a.ooms = d.num_ooms;
      a.alloc_retries = d.num_alloc_retries;
      a.on_gpu = d.backend.rfind("cuda", 0) == 0;
      // Two allocators of one process found on one GPU are one series (a series twice is invalid).
      auto same = std::find_if(s.allocators.begin(), s.allocators.end(),
                               [&](const AllocatorMetrics& b) { return b.gpu == a.gpu && b.pid == a.pid; });
      if (same == s.allocators.end()) {
        s.allocators.push_back(std::move(a));
        continue;
      }
      same->allocated_bytes += a.allocated_bytes;
      same->reserved_bytes += a.reserved_bytes;
      same->peak_allocated_bytes += a.peak_allocated_bytes;
      same->requested_bytes += a.requested_bytes;
      if (a.largest_free_bytes) same->largest_free_bytes = std::max(same->largest_free_bytes.value_or(0), *a.largest_free_bytes);
      same->limit_bytes = same->limit_bytes && a.limit_bytes ? std::optional(*same->limit_bytes + *a.limit_bytes) : std::nullopt;
      same->ooms += a.ooms;
      same->alloc_retries += a.alloc_retries;
    }
  }
}

Snapshot Collector::collect() {
  const auto start = std::chrono::steady_clock::now();
  Snapshot s;
  std::string nvml_error;
  if (!sampler_) {
    try {
      monitor::SamplerOptions o;
      o.processes = options_.processes;
      o.xid = true;  // registered once here; each sample only drains what arrived
      o.remapped_rows = true;
      sampler_.emplace(o);
    } catch (const std::exception& e) {  // NVML missing or failing, or no GPU: tried again next sample
      nvml_error = e.what();
    }
  }
  if (sampler_) {
    if (options_.processes && start - holders_at_ >= options_.holder_scan_every) {
      holders_ = monitor::scan_device_holders(options_.dev_dir);
      holders_at_ = start;
    }
    s = snapshot_from(sampler_->sample(), options_.processes ? holders_ : monitor::HolderScan{}, options_);
  } else {
    s.hostname = host_name();
    s.health.nvml_error = nvml_error;
    s.health.taken_at_unix = unix_seconds(std::chrono::system_clock::now());
  }
  if (options_.control) add_allocators(s, options_);
  s.health.duration_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

}  // namespace gpumem::exporter
