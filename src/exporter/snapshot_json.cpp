#include "exporter/snapshot_json.hpp"

namespace gpumem::exporter {
namespace {

template <class T>
nlohmann::ordered_json opt(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

const char* kind_name(ProcessKind k) {
  return k == ProcessKind::kContext ? "context" : k == ProcessKind::kExited ? "exited" : "no_context";
}

}  // namespace

nlohmann::ordered_json snapshot_json(const Snapshot& s) {
  nlohmann::ordered_json j;
  j["hostname"] = s.hostname;
  j["gpus"] = nlohmann::ordered_json::array();
  for (const GpuMetrics& g : s.gpus) {
    j["gpus"].push_back({{"index", g.index}, {"uuid", g.uuid}, {"pci_bus_id", g.pci_bus_id},
                         {"name", g.model_name}, {"minor", opt(g.minor)}, {"up", g.up},
                         {"memory_total_bytes", opt(g.fb_total_bytes)}, {"memory_used_bytes", opt(g.fb_used_bytes)},
                         {"memory_free_bytes", opt(g.fb_free_bytes)}, {"memory_reserved_bytes", opt(g.fb_reserved_bytes)},
                         {"utilization_gpu_percent", opt(g.gpu_util_percent)},
                         {"utilization_memory_percent", opt(g.mem_copy_util_percent)},
                         {"clock_sm_mhz", opt(g.sm_clock_mhz)}, {"clock_memory_mhz", opt(g.mem_clock_mhz)},
                         {"temperature_gpu_c", opt(g.gpu_temp_c)}, {"temperature_memory_c", opt(g.memory_temp_c)},
                         {"power_w", opt(g.power_watts)}, {"energy_mj", opt(g.total_energy_mj)},
                         {"pcie_replays", opt(g.pcie_replays)}, {"last_xid", opt(g.last_xid)},
                         {"remapped_rows_correctable", opt(g.remapped_rows_correctable)},
                         {"remapped_rows_uncorrectable", opt(g.remapped_rows_uncorrectable)},
                         {"row_remap_failure", opt(g.row_remap_failure)}});
  }
  j["processes"] = nlohmann::ordered_json::array();
  for (const ProcessMetrics& p : s.processes) {
    j["processes"].push_back({{"gpu", p.gpu}, {"pid", p.pid}, {"kind", kind_name(p.kind)},
                              {"used_bytes", opt(p.used_bytes)}, {"user", p.user}, {"command", p.command},
                              {"container", p.container}, {"pod", p.pod}, {"namespace", p.namespace_},
                              {"pod_uid", p.pod_uid}});
  }
  j["allocators"] = nlohmann::ordered_json::array();
  for (const AllocatorMetrics& a : s.allocators) {
    j["allocators"].push_back({{"gpu", a.gpu}, {"pid", a.pid}, {"command", a.command},
                               {"allocated_bytes", a.allocated_bytes}, {"reserved_bytes", a.reserved_bytes},
                               {"peak_allocated_bytes", a.peak_allocated_bytes}, {"requested_bytes", a.requested_bytes},
                               {"largest_free_bytes", opt(a.largest_free_bytes)}, {"limit_bytes", opt(a.limit_bytes)},
                               {"ooms", a.ooms}, {"alloc_retries", a.alloc_retries}});
  }
  j["health"] = {{"nvml_up", s.health.nvml_up}, {"nvml_error", s.health.nvml_error},
                 {"nvml_errors", s.health.nvml_errors}, {"unreadable_processes", s.health.unreadable_processes},
                 {"control_errors", s.health.control_errors}, {"sample_seconds", s.health.duration_seconds}};
  return j;
}

}  // namespace gpumem::exporter
