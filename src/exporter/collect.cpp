#include "exporter/collect.hpp"

#include <unistd.h>

#include <chrono>

#include "exporter/kubernetes.hpp"
#include "monitor/common.hpp"
#include "monitor/ps.hpp"

namespace gpumem::exporter {
namespace {

namespace abi = nvml::abi;

// Takes a reading's value; counts a failure that is not "not supported" as an NVML error.
template <class T>
std::optional<T> take(const nvml::Reading<T>& r, unsigned long long& errors) {
  if (r) return *r;
  if (!r.not_supported()) ++errors;
  return std::nullopt;
}

GpuMetrics read_gpu(const nvml::Nvml& nvml, unsigned index, unsigned long long& errors) {
  GpuMetrics g;
  g.index = index;
  auto handle = nvml.device(index);
  if (!handle) {
    ++errors;
    g.up = false;
    return g;
  }
  abi::Device d = *handle;
  g.model_name = take(nvml.name(d), errors).value_or("");
  g.uuid = take(nvml.uuid(d), errors).value_or("");
  g.pci_bus_id = take(nvml.pci_bus_id(d), errors).value_or("");
  g.minor = take(nvml.minor_number(d), errors);
  auto mem = nvml.memory(d);
  if (mem.status == abi::kErrorGpuIsLost) g.up = false;
  if (auto m = take(mem, errors)) {
    g.fb_total_bytes = m->total;
    g.fb_used_bytes = m->used;
    g.fb_free_bytes = m->free;
    g.fb_reserved_bytes = m->reserved;
  }
  if (auto u = take(nvml.utilization(d), errors)) {
    g.gpu_util_percent = u->gpu;
    g.mem_copy_util_percent = u->memory;
  }
  g.sm_clock_mhz = take(nvml.clock_mhz(d, abi::kClockSm), errors);
  g.mem_clock_mhz = take(nvml.clock_mhz(d, abi::kClockMem), errors);
  g.gpu_temp_c = take(nvml.temperature(d), errors);
  g.memory_temp_c = take(nvml.memory_temperature(d), errors);
  if (auto mw = take(nvml.power_mw(d), errors)) g.power_watts = *mw / 1000.0;
  g.total_energy_mj = take(nvml.total_energy_mj(d), errors);
  g.pcie_replays = take(nvml.pcie_replay_counter(d), errors);
  return g;
}

void read_processes(const nvml::Nvml& nvml, const CollectOptions& options, Snapshot& s) {
  std::vector<monitor::GpuRef> refs;
  for (const GpuMetrics& g : s.gpus) {
    monitor::GpuRef ref;
    ref.index = g.index;
    auto handle = nvml.device(g.index);
    if (handle) ref.device = *handle;
    else ref.status = handle.status;
    refs.push_back(ref);
  }
  monitor::PsReport ps = monitor::collect_ps(nvml, refs, options.dev_dir);
  s.health.unreadable_processes = ps.unreadable_fd_dirs;
  for (const monitor::PsEntry& e : ps.entries) {
    if (e.kind == monitor::PsKind::kNoContext && e.proc && monitor::is_driver_daemon(*e.proc)) continue;
    ProcessMetrics p;
    p.gpu = e.gpu;
    p.pid = e.pid;
    p.kind = e.kind == monitor::PsKind::kContext ? ProcessKind::kContext
             : e.kind == monitor::PsKind::kGone  ? ProcessKind::kExited
                                                 : ProcessKind::kNoContext;
    p.used_bytes = e.used_bytes;
    if (e.proc) {
      p.user = e.proc->user;
      p.command = e.proc->comm;
      p.container = e.proc->container;
      if (!p.container.empty()) {
        PodIdentity pod = read_pod_identity(e.pid, options.proc_dir);
        p.pod_uid = pod.uid;
        p.pod = pod.name;
        p.namespace_ = pod.namespace_;
      }
    }
    s.processes.push_back(std::move(p));
  }
}

}  // namespace

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

Snapshot collect_snapshot(const nvml::Nvml* nvml, const CollectOptions& options) {
  auto start = std::chrono::steady_clock::now();
  Snapshot s;
  s.hostname = host_name();
  s.health.nvml_up = nvml != nullptr;
  if (nvml) {
    unsigned long long errors = 0;
    auto count = nvml->device_count();
    if (!count) ++errors;
    for (unsigned i = 0; count && i < *count; ++i) s.gpus.push_back(read_gpu(*nvml, i, errors));
    if (options.processes) read_processes(*nvml, options, s);
    s.health.nvml_errors = errors;
  }
  s.health.duration_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.health.taken_at_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return s;
}

}  // namespace gpumem::exporter
