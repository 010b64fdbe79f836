#include "tui/sample_json.hpp"

#include <chrono>

namespace gpumem::tui {
namespace {

using Json = nlohmann::ordered_json;

template <class T>
Json opt(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

Json text_or_null(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

const char* kind_name(RowKind k) {
  return k == RowKind::kContext ? "context" : k == RowKind::kNoContext ? "no_context" : "gone";
}

Json process_json(const ProcRow& r) {
  Json p;
  p["pid"] = r.pid;
  p["kind"] = kind_name(r.kind);
  p["type"] = r.type;
  p["used_memory_bytes"] = opt(r.gpu_bytes);
  p["user"] = r.proc ? Json(r.proc->user) : Json(nullptr);
  p["command"] = r.proc ? text_or_null(r.proc->cmdline) : Json(nullptr);
  p["name"] = r.proc ? Json(r.proc->comm) : Json(nullptr);
  p["container"] = r.proc ? text_or_null(r.proc->container) : Json(nullptr);
  p["cpu_percent"] = opt(r.cpu_percent);
  p["sm_percent"] = opt(r.sm_percent);
  p["allocated_bytes"] = opt(r.alloc_bytes);
  p["reserved_bytes"] = opt(r.reserved_bytes);
  p["allocated_peak_bytes"] = opt(r.peak_bytes);
  p["limit_bytes"] = opt(r.limit_bytes);
  p["device"] = opt(r.control_device);
  return p;
}

Json gpu_json(const monitor::GpuSample& g, const std::vector<ProcRow>& rows) {
  Json o;
  o["index"] = g.index;
  o["error"] = text_or_null(g.error);
  o["name"] = opt(g.name);
  o["uuid"] = opt(g.uuid);
  o["bus_id"] = opt(g.bus_id);
  o["minor"] = opt(g.minor);
  o["memory_total_bytes"] = opt(g.memory_total);
  o["memory_used_bytes"] = opt(g.memory_used);
  o["memory_free_bytes"] = opt(g.memory_free);
  o["memory_reserved_bytes"] = opt(g.memory_reserved);
  o["utilization_gpu_percent"] = opt(g.util_gpu);
  o["utilization_memory_percent"] = opt(g.util_memory);
  o["temperature_c"] = opt(g.temperature);
  o["memory_temperature_c"] = opt(g.memory_temperature);
  o["power_mw"] = opt(g.power_mw);
  o["power_limit_mw"] = opt(g.power_limit_mw);
  o["clock_graphics_mhz"] = opt(g.clock_graphics_mhz);
  o["clock_sm_mhz"] = opt(g.clock_sm_mhz);
  o["clock_memory_mhz"] = opt(g.clock_memory_mhz);
  o["max_clock_graphics_mhz"] = opt(g.max_clock_graphics_mhz);
  o["max_clock_sm_mhz"] = opt(g.max_clock_sm_mhz);
  o["max_clock_memory_mhz"] = opt(g.max_clock_memory_mhz);
  o["fan_percent"] = opt(g.fan_percent);
  o["pstate"] = g.pstate ? Json("P" + std::to_string(*g.pstate)) : Json(nullptr);
  o["energy_mj"] = opt(g.energy_mj);
  o["pcie_replays"] = opt(g.pcie_replays);
  o["encoder_percent"] = opt(g.encoder_percent);
  o["decoder_percent"] = opt(g.decoder_percent);
  o["jpg_percent"] = opt(g.jpg_percent);
  o["ofa_percent"] = opt(g.ofa_percent);
  o["bar1_used_bytes"] = opt(g.bar1_used);
  o["ecc_corrected"] = opt(g.ecc_corrected);
  o["ecc_uncorrected"] = opt(g.ecc_uncorrected);
  o["processes_error"] = text_or_null(g.processes_error);
  Json procs = Json::array();
  for (const ProcRow& r : rows)
    if (r.gpu == g.index) procs.push_back(process_json(r));
  // null: not asked for, or NVML could not list them (processes_error says why)
  o["processes"] = g.processes || !procs.empty() ? procs : Json(nullptr);
  return o;
}

}  // namespace

nlohmann::ordered_json sample_json(const TopData& d) {
  Json j;
  j["schema"] = kSampleSchema;
  j["taken_at"] = std::chrono::duration<double>(d.sample.taken_at.time_since_epoch()).count();
  j["nvml_ms"] = std::chrono::duration<double, std::milli>(d.sample.took).count();
  j["control_error"] = text_or_null(d.control_note);
  j["gpus"] = Json::array();
  for (const monitor::GpuSample& g : d.sample.gpus) j["gpus"].push_back(gpu_json(g, d.rows));
  return j;
}

}  // namespace gpumem::tui
