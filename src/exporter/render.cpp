#include "exporter/render.hpp"

#include <algorithm>
#include <map>
#include <optional>

namespace gpumem::exporter {
namespace {


// nvidia-smi's whole MiB (rounded up), so the numbers match what `nvidia-smi` and `gpumem query` print.
unsigned long long mib(unsigned long long bytes) { return (bytes + (1ull << 20) - 1) >> 20; }

// dcgm-exporter's label set; gpumem's own families leave out modelName, the one name promtool's
// lint rejects (camelCase), and keep the others so queries can join them on gpu, UUID or Hostname.
std::string gpu_labels(const GpuMetrics& g, const std::string& hostname, bool dcgm) {
  std::string l;
  append_label(l, "gpu", std::to_string(g.index));
  append_label(l, "UUID", g.uuid);
  append_label(l, "pci_bus_id", g.pci_bus_id);
  append_label(l, "device", g.minor ? "nvidia" + std::to_string(*g.minor) : std::string());
  if (dcgm) append_label(l, "modelName", g.model_name);
  append_label(l, "Hostname", hostname);
  return l;
}

struct GpuRow {
  const GpuMetrics* gpu;
  std::string labels;      // dcgm-exporter's
  std::string own_labels;  // gpumem_* families'
};

template <class T, class Get>
void gpu_family(ExpositionWriter& w, const std::vector<GpuRow>& rows, std::string_view name, Type type,
                std::string_view help, Get get) {
  bool any = std::any_of(rows.begin(), rows.end(), [&](const GpuRow& r) { return get(*r.gpu).has_value(); });
  if (!any) return;
  w.family(name, type, help);
  for (const GpuRow& r : rows)
    if (auto v = get(*r.gpu)) w.sample(r.labels, static_cast<T>(*v));
}

void render_dcgm(ExpositionWriter& w, const std::vector<GpuRow>& rows) {
  using ULL = unsigned long long;
  auto in_mib = [](const std::optional<ULL>& b) { return b ? std::optional<ULL>(mib(*b)) : std::nullopt; };
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_FB_FREE", Type::kGauge, "Framebuffer memory free (in MiB).",
                  [&](const GpuMetrics& g) { return in_mib(g.fb_free_bytes); });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_FB_USED", Type::kGauge, "Framebuffer memory used (in MiB).",
                  [&](const GpuMetrics& g) { return in_mib(g.fb_used_bytes); });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_FB_RESERVED", Type::kGauge, "Framebuffer memory reserved (in MiB).",
                  [&](const GpuMetrics& g) { return in_mib(g.fb_reserved_bytes); });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_GPU_UTIL", Type::kGauge, "GPU utilization (in %).",
                  [](const GpuMetrics& g) { return g.gpu_util_percent; });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_MEM_COPY_UTIL", Type::kGauge, "Memory utilization (in %).",
                  [](const GpuMetrics& g) { return g.mem_copy_util_percent; });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_SM_CLOCK", Type::kGauge, "SM clock frequency (in MHz).",
                  [](const GpuMetrics& g) { return g.sm_clock_mhz; });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_MEM_CLOCK", Type::kGauge, "Memory clock frequency (in MHz).",
                  [](const GpuMetrics& g) { return g.mem_clock_mhz; });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_GPU_TEMP", Type::kGauge, "GPU temperature (in C).",
                  [](const GpuMetrics& g) { return g.gpu_temp_c; });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_MEMORY_TEMP", Type::kGauge, "Memory temperature (in C).",
                  [](const GpuMetrics& g) { return g.memory_temp_c; });
  gpu_family<double>(w, rows, "DCGM_FI_DEV_POWER_USAGE", Type::kGauge, "Power draw (in W).",
                     [](const GpuMetrics& g) { return g.power_watts; });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Type::kCounter,
                  "Total energy consumption since boot (in mJ).", [](const GpuMetrics& g) { return g.total_energy_mj; });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_XID_ERRORS", Type::kGauge, "Value of the last XID error encountered.",
                  [](const GpuMetrics& g) { return g.last_xid; });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", Type::kCounter,
                  "Number of remapped rows for uncorrectable errors", [](const GpuMetrics& g) { return g.remapped_rows_uncorrectable; });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", Type::kCounter,
                  "Number of remapped rows for correctable errors", [](const GpuMetrics& g) { return g.remapped_rows_correctable; });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_ROW_REMAP_FAILURE", Type::kGauge, "Whether remapping of rows has failed",
                  [](const GpuMetrics& g) { return g.row_remap_failure; });
  gpu_family<ULL>(w, rows, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", Type::kCounter, "Total number of PCIe retries.",
                  [](const GpuMetrics& g) { return g.pcie_replays; });
}

// Live / cached / other / free per GPU: live and cached from the gpumem allocators on it, other is
// every other used or driver-reserved byte, so the four add up to the total.
void render_memory_split(ExpositionWriter& w, const std::vector<GpuRow>& rows, const Snapshot& s) {
  std::map<unsigned, std::pair<long long, long long>> by_gpu;  // allocated, reserved
  for (const AllocatorMetrics& a : s.allocators) {
    if (!a.on_gpu) continue;
    by_gpu[a.gpu].first += a.allocated_bytes;
    by_gpu[a.gpu].second += a.reserved_bytes;
  }
  bool header = false;
  for (const GpuRow& r : rows) {
    const GpuMetrics& g = *r.gpu;
    if (!g.fb_used_bytes || !g.fb_free_bytes) continue;
    if (!header) {
      w.family("gpumem_gpu_memory_bytes", Type::kGauge,
               "GPU memory by state: live (allocated by gpumem allocators), cached (reserved by them, not allocated), other, free.");
      header = true;
    }
    // Unsigned and saturating: whatever a driver reports (used beyond the total, values near 2^64), no
    // state goes negative or wraps.
    const auto [allocated_signed, reserved_signed] = by_gpu[g.index];
    const unsigned long long allocated = static_cast<unsigned long long>(std::max(0LL, allocated_signed));
    const unsigned long long reserved = static_cast<unsigned long long>(std::max(0LL, reserved_signed));
    unsigned long long used = 0;
    if (__builtin_add_overflow(*g.fb_used_bytes, g.fb_reserved_bytes.value_or(0), &used)) used = ~0ULL;
    std::pair<const char*, unsigned long long> parts[] = {{"live", allocated},
                                                          {"cached", reserved > allocated ? reserved - allocated : 0},
                                                          {"other", used > reserved ? used - reserved : 0},
                                                          {"free", *g.fb_free_bytes}};
    for (auto [state, bytes] : parts) {
      std::string l = r.own_labels;
      append_label(l, "state", state);
      w.sample(l, bytes);
    }
  }
  if (rows.empty()) return;
  w.family("gpumem_gpu_up", Type::kGauge, "1 when the GPU answered NVML in the last sample, 0 when it is lost or failing.");
  for (const GpuRow& r : rows) w.sample(r.own_labels, static_cast<unsigned long long>(r.gpu->up ? 1 : 0));
}

const GpuMetrics* find_gpu(const Snapshot& s, unsigned index) {
  for (const GpuMetrics& g : s.gpus)
    if (g.index == index) return &g;
  return nullptr;
}

std::string process_labels(const Snapshot& s, unsigned gpu, int pid) {
  std::string l;
  append_label(l, "gpu", std::to_string(gpu));
  const GpuMetrics* g = find_gpu(s, gpu);
  append_label(l, "UUID", g ? g->uuid : std::string());
  append_label(l, "Hostname", s.hostname);
  append_label(l, "pid", std::to_string(pid));
  return l;
}

void owner_labels(std::string& l, const ProcessMetrics& p) {
  append_label(l, "user", p.user);
  append_label(l, "command", p.command);
  append_label(l, "container", p.container);
  append_label(l, "pod", p.pod);
  append_label(l, "namespace", p.namespace_);
}

void render_processes(ExpositionWriter& w, const Snapshot& s) {
  bool header = false;
  for (const ProcessMetrics& p : s.processes) {
    if (p.kind != ProcessKind::kContext || !p.used_bytes) continue;
    if (!header) w.family("gpumem_process_gpu_memory_bytes", Type::kGauge, "GPU memory used by a process, as NVML reports it.");
    header = true;
    std::string l = process_labels(s, p.gpu, p.pid);
    owner_labels(l, p);
    w.sample(l, *p.used_bytes);
  }
  header = false;
  for (const ProcessMetrics& p : s.processes) {
    if (p.kind == ProcessKind::kContext) continue;
    if (!header)
      w.family("gpumem_ghost_process_info", Type::kGauge,
               "A ghost: kind=exited is listed by NVML but its PID is gone; kind=no_context holds /dev/nvidiaN without an NVML context.");
    header = true;
    std::string l = process_labels(s, p.gpu, p.pid);
    append_label(l, "kind", p.kind == ProcessKind::kExited ? "exited" : "no_context");
    owner_labels(l, p);
    w.sample(l, 1ULL);
  }
  header = false;
  for (const ProcessMetrics& p : s.processes) {
    if (p.kind != ProcessKind::kExited || !p.used_bytes) continue;
    if (!header) w.family("gpumem_ghost_gpu_memory_bytes", Type::kGauge, "GPU memory NVML still charges to a process that no longer exists.");
    header = true;
    w.sample(process_labels(s, p.gpu, p.pid), *p.used_bytes);
  }
}

template <class Get>
void allocator_family(ExpositionWriter& w, const Snapshot& s, const std::vector<std::string>& labels,
                      std::string_view name, Type type, std::string_view help, Get get) {
  bool header = false;
  for (size_t i = 0; i < s.allocators.size(); ++i) {
    std::optional<double> v = get(s.allocators[i]);
    if (!v) continue;
    if (!header) w.family(name, type, help);
    header = true;
    w.sample(labels[i], *v);
  }
}

void render_allocators(ExpositionWriter& w, const Snapshot& s) {
  std::vector<std::string> labels;
  for (const AllocatorMetrics& a : s.allocators) {
    std::string l = process_labels(s, a.gpu, a.pid);
    append_label(l, "command", a.command);
    labels.push_back(std::move(l));
  }
  using A = AllocatorMetrics;
  using D = std::optional<double>;
  auto opt = [](const std::optional<long long>& v) { return v ? D(static_cast<double>(*v)) : std::nullopt; };
  allocator_family(w, s, labels, "gpumem_allocator_allocated_bytes", Type::kGauge, "Bytes in blocks the program holds.",
                   [](const A& a) { return D(a.allocated_bytes); });
  allocator_family(w, s, labels, "gpumem_allocator_reserved_bytes", Type::kGauge, "Bytes the allocator holds from the device (allocated plus cached).",
                   [](const A& a) { return D(a.reserved_bytes); });
  allocator_family(w, s, labels, "gpumem_allocator_peak_allocated_bytes", Type::kGauge, "Peak of allocated bytes since the last reset.",
                   [](const A& a) { return D(a.peak_allocated_bytes); });
  allocator_family(w, s, labels, "gpumem_allocator_requested_bytes", Type::kGauge, "Bytes the program asked for, before rounding.",
                   [](const A& a) { return D(a.requested_bytes); });
  allocator_family(w, s, labels, "gpumem_allocator_largest_free_block_bytes", Type::kGauge, "Largest free block the allocator has mapped (handed out with no driver call); free pages elsewhere can still be stitched into a larger one without growing.",
                   [&](const A& a) { return opt(a.largest_free_bytes); });
  allocator_family(w, s, labels, "gpumem_allocator_limit_bytes", Type::kGauge, "The allocator's memory limit.",
                   [&](const A& a) { return opt(a.limit_bytes); });
  allocator_family(w, s, labels, "gpumem_allocator_reserved_to_allocated_ratio", Type::kGauge,
                   "Reserved over allocated bytes: 1 is no overhead; higher is cache and fragmentation.",
                   [](const A& a) { return a.allocated_bytes > 0 ? D(double(a.reserved_bytes) / double(a.allocated_bytes)) : std::nullopt; });
  allocator_family(w, s, labels, "gpumem_allocator_ooms_total", Type::kCounter, "Out-of-memory errors the allocator raised.",
                   [](const A& a) { return D(a.ooms); });
  allocator_family(w, s, labels, "gpumem_allocator_alloc_retries_total", Type::kCounter, "Allocations that succeeded only after freeing the cache.",
                   [](const A& a) { return D(a.alloc_retries); });
}

void render_health(ExpositionWriter& w, const Snapshot& s, const ExporterCounters& c) {
  std::string l;
  append_label(l, "Hostname", s.hostname);
  auto gauge = [&](std::string_view name, std::string_view help, double v) {
    w.family(name, Type::kGauge, help);
    w.sample(l, v);
  };
  auto counter = [&](std::string_view name, std::string_view help, unsigned long long v) {
    w.family(name, Type::kCounter, help);
    w.sample(l, v);
  };
  gauge("gpumem_exporter_nvml_up", "1 when NVML is loaded and initialised, 0 when it is missing or failing.", s.health.nvml_up ? 1 : 0);
  counter("gpumem_exporter_nvml_errors_total", "NVML reads that failed (not counting fields a GPU does not support).", c.nvml_errors);
  gauge("gpumem_exporter_unreadable_processes", "Processes whose open files the exporter may not read (run as root to see them).",
        s.health.unreadable_processes);
  counter("gpumem_exporter_control_errors_total", "gpumem processes whose control channel could not be read.", c.control_errors);
  counter("gpumem_exporter_samples_total", "Background samples taken.", c.samples);
  gauge("gpumem_exporter_sample_duration_seconds", "How long the last background sample took.", s.health.duration_seconds);
  gauge("gpumem_exporter_sample_age_seconds", "Age of the sample this scrape serves.",
        s.health.taken_at_unix > 0 ? std::max(0.0, c.now_unix - s.health.taken_at_unix) : 0);
  counter("gpumem_exporter_scrapes_total", "Scrapes of /metrics served before this one.", c.scrapes);
  gauge("gpumem_exporter_scrape_duration_seconds", "How long the previous scrape took to render and send.", c.last_scrape_seconds);
}

}  // namespace

std::string render_metrics(const Snapshot& s, const ExporterCounters& counters, Format format) {
  std::string out;
  out.reserve(4096 + 512 * (s.gpus.size() * 20 + s.processes.size() + s.allocators.size() * 10));
  ExpositionWriter w(format, out);
  std::vector<GpuRow> rows;
  rows.reserve(s.gpus.size());
  for (const GpuMetrics& g : s.gpus) rows.push_back({&g, gpu_labels(g, s.hostname, true), gpu_labels(g, s.hostname, false)});
  render_dcgm(w, rows);
  render_memory_split(w, rows, s);
  render_processes(w, s);
  render_allocators(w, s);
  render_health(w, s, counters);
  w.finish();
  return out;
}

}  // namespace gpumem::exporter
