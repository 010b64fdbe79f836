#include "monitor/info.hpp"

#include "gpumem/printable.hpp"
#include "monitor/procfs.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace gpumem::monitor {
namespace {

template <class T>
std::optional<T> opt(const nvml::Reading<T>& r) {
  return r.value;
}

std::string or_na(const std::optional<std::string>& s) { return s ? *s : "N/A"; }

std::string mib(const std::optional<unsigned long long>& b) {
  return b ? std::to_string(to_mib(*b)) + " MiB" : "N/A";
}

template <class T>
nlohmann::ordered_json j(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

InfoReport collect_info(const nvml::Nvml& nvml, const std::vector<GpuRef>& gpus) {
  InfoReport r;
  r.driver_version = opt(nvml.driver_version());
  r.cuda_driver_version = opt(nvml.cuda_driver_version());
  r.library = nvml.library().path();
  std::vector<CudaGpu>& cuda_gpus = r.cuda_gpus;
  for (const GpuRef& ref : gpus) {
    InfoGpu g;
    g.index = ref.index;
    if (!ref.device) {
      g.error = nvml.error_string(ref.status);
      r.gpus.push_back(g);
      continue;
    }
    auto d = ref.device;
    auto name = nvml.name(d);
    if (name.status == nvml::abi::kErrorGpuIsLost) g.error = nvml.error_string(name.status);
    g.name = name.value;
    g.uuid = opt(nvml.uuid(d));
    g.bus_id = opt(nvml.pci_bus_id(d));
    g.memory = opt(nvml.memory(d));
    g.persistence = opt(nvml.persistence_mode(d));
    g.ecc = opt(nvml.ecc_mode(d));
    if (g.ecc && g.ecc->current) {
      g.ecc_uncorrected = opt(nvml.ecc_errors(d, nvml::abi::kEccUncorrected, nvml::abi::kEccVolatile));
      g.ecc_corrected = opt(nvml.ecc_errors(d, nvml::abi::kEccCorrected, nvml::abi::kEccVolatile));
    }
    g.mig = opt(nvml.mig_mode(d));
    g.compute_mode = opt(nvml.compute_mode(d));
    g.capability = opt(nvml.cuda_capability(d));
    // Compute and graphics processes, as nvidia-smi lists them (one line for a process in both lists).
    auto procs = nvml.compute_processes(d);
    if (procs) {
      g.processes.emplace();
      const auto graphics = nvml.graphics_processes(d);
      for (bool gfx : {false, true}) {
        if (gfx && !graphics) break;
        for (const auto& p : gfx ? *graphics : *procs) {
          // Only across the two lists: under MIG one PID is listed once per GPU instance, each its own line.
          auto seen = std::find_if(g.processes->begin(), g.processes->end(), [&](const auto& q) { return q.pid == p.pid; });
          if (gfx && seen != g.processes->end() && g.process_types[std::size_t(seen - g.processes->begin())] == "C") {
            g.process_types[std::size_t(seen - g.processes->begin())] = "C+G";
            continue;
          }
          g.processes->push_back(p);
          g.process_types.push_back(gfx ? "G" : "C");
          g.process_names.push_back(nvml.process_name(p.pid).value.value_or("?"));
          g.process_gone.push_back(!read_process(int(p.pid)));
        }
      }
    }
    r.gpus.push_back(g);
  }
  // CUDA numbers every GPU, selected or not: `info -i 1` must still say which cuda:N GPU 1 is. So info
  // reads every GPU's identity (a handle each), whatever -i selects.
  for (const GpuRef& ref : select_gpus(nvml, "")) {
    if (!ref.device) continue;
    auto name = nvml.name(ref.device);
    if (name.status == nvml::abi::kErrorGpuIsLost) continue;  // CUDA does not enumerate a GPU that has fallen off the bus
    cuda_gpus.push_back(CudaGpu{ref.index, opt(nvml.uuid(ref.device)).value_or(""), opt(nvml.pci_bus_id(ref.device)).value_or(""),
                                name.value.value_or(""), opt(nvml.cuda_capability(ref.device))});
  }
  r.cuda = cuda_order(cuda_gpus, std::getenv("CUDA_DEVICE_ORDER"), std::getenv("CUDA_VISIBLE_DEVICES"));

  for (const InfoGpu& g : r.gpus) {
    std::string who = "GPU " + std::to_string(g.index);
    if (!g.error.empty()) {
      r.warnings.push_back(who + ": " + g.error + "; it needs a reset or a reboot, and its processes may be hung.");
      continue;
    }
    if (g.persistence && !*g.persistence)
      r.warnings.push_back(who + ": persistence mode is off; the driver re-initialises the GPU for every first process (slow starts).");
    if (g.ecc_uncorrected && *g.ecc_uncorrected > 0)
      r.warnings.push_back(who + ": " + std::to_string(*g.ecc_uncorrected) + " uncorrected ECC errors since the driver loaded.");
    if (g.ecc && g.ecc->current != g.ecc->pending)
      r.warnings.push_back(who + ": an ECC mode change is pending until the next reset.");
    if (g.mig && g.mig->current != g.mig->pending)
      r.warnings.push_back(who + ": a MIG mode change is pending until the next reset.");
    if (g.compute_mode && *g.compute_mode == 2)
      r.warnings.push_back(who + ": compute mode is Prohibited; no CUDA process can use it.");
  }
  if (r.cuda.order_estimated)
    r.warnings.push_back("GPUs differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA's numbering may differ from nvidia-smi's.");
  for (const std::string& n : r.cuda.notes) r.warnings.push_back(n);
  return r;
}

std::string render_info(const InfoReport& r) {
  std::string out;
  char line[512];
  out += "Driver " + or_na(r.driver_version) + ", CUDA driver " +
         (r.cuda_driver_version ? cuda_version_text(*r.cuda_driver_version) : "N/A") + ", NVML " + r.library + "\n";
  for (const InfoGpu& g : r.gpus) {
    out += "\nGPU " + std::to_string(g.index) + ": ";
    if (!g.error.empty()) {
      out += "[" + g.error + "]\n";
      continue;
    }
    out += or_na(g.name) + "  " + or_na(g.uuid) + "  " + or_na(g.bus_id) + "\n";
    if (g.memory) {
      std::snprintf(line, sizeof line, "  memory       total %s, reserved %s, used %s, free %s\n", mib(g.memory->total).c_str(),
                    mib(g.memory->reserved).c_str(), mib(g.memory->used).c_str(), mib(g.memory->free).c_str());
      out += line;
    } else {
      out += "  memory       N/A\n";
    }
    std::string ecc = !g.ecc ? "N/A" : g.ecc->current ? "Enabled" : "Disabled";
    if (g.ecc_uncorrected || g.ecc_corrected)
      ecc += " (volatile errors: " + (g.ecc_uncorrected ? std::to_string(*g.ecc_uncorrected) : "N/A") + " uncorrected, " +
             (g.ecc_corrected ? std::to_string(*g.ecc_corrected) : "N/A") + " corrected)";
    out += "  persistence  " + std::string(!g.persistence ? "N/A" : *g.persistence ? "Enabled" : "Disabled") + "\n";
    out += "  ECC          " + ecc + "\n";
    out += "  compute mode " + std::string(g.compute_mode ? nvml::compute_mode_name(*g.compute_mode) : "N/A") + "\n";
    out += "  MIG          " + std::string(!g.mig ? "N/A" : g.mig->current ? "Enabled" : "Disabled") + "\n";
    if (g.capability) out += "  capability   " + std::to_string(g.capability->first) + "." + std::to_string(g.capability->second) + "\n";
    if (!g.processes) {
      out += "  processes    N/A\n";
    } else if (g.processes->empty()) {
      out += "  processes    none\n";
    } else {
      for (size_t i = 0; i < g.processes->size(); ++i) {
        const auto& p = (*g.processes)[i];
        std::snprintf(line, sizeof line, "  %-12s %d %s %s %s%s\n", i ? "" : "processes", p.pid, g.process_types[i].c_str(),
                      printable(g.process_names[i]).c_str(), mib(p.used_bytes).c_str(),
                      g.process_gone[i] ? " (no longer exists)" : "");
        out += line;
      }
    }
  }
  out += "\nCUDA numbering (CUDA_DEVICE_ORDER=" + r.cuda.order + (r.cuda.order_estimated ? ", estimated" : "") + ", " +
         (r.cuda.visible_env ? "CUDA_VISIBLE_DEVICES=" + *r.cuda.visible_env : std::string("CUDA_VISIBLE_DEVICES unset")) + "):\n";
  if (r.cuda.visible.empty()) out += "  no GPU is visible to CUDA\n";
  for (size_t i = 0; i < r.cuda.visible.size(); ++i) {
    unsigned n = r.cuda.visible[i];
    std::string bus = "N/A";
    for (const CudaGpu& g : r.cuda_gpus)
      if (g.nvml_index == n && !g.bus_id.empty()) bus = g.bus_id;
    out += "  cuda:" + std::to_string(i) + " -> GPU " + std::to_string(n) + " (" + bus + ")\n";
  }
  out += r.warnings.empty() ? "\nNo warnings.\n" : "\nWarnings:\n";
  for (const std::string& w : r.warnings) out += "  " + w + "\n";
  return out;
}

nlohmann::ordered_json info_json(const InfoReport& r) {
  nlohmann::ordered_json out;
  out["driver_version"] = j(r.driver_version);
  out["cuda_driver_version"] = r.cuda_driver_version ? nlohmann::ordered_json(cuda_version_text(*r.cuda_driver_version)) : nullptr;
  out["nvml_library"] = r.library;
  out["gpus"] = nlohmann::ordered_json::array();
  for (const InfoGpu& g : r.gpus) {
    nlohmann::ordered_json x;
    x["index"] = g.index;
    x["error"] = g.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(g.error);
    x["name"] = j(g.name);
    x["uuid"] = j(g.uuid);
    x["pci_bus_id"] = j(g.bus_id);
    nlohmann::ordered_json mem = nullptr;
    if (g.memory)
      mem = {{"total", g.memory->total}, {"reserved", j(g.memory->reserved)}, {"used", g.memory->used}, {"free", g.memory->free}};
    x["memory_bytes"] = mem;
    x["persistence_mode"] = j(g.persistence);
    x["ecc_mode"] = g.ecc ? nlohmann::ordered_json(g.ecc->current) : nullptr;
    x["ecc_errors_volatile"] = {{"uncorrected", j(g.ecc_uncorrected)}, {"corrected", j(g.ecc_corrected)}};
    x["compute_mode"] = g.compute_mode ? nlohmann::ordered_json(nvml::compute_mode_name(*g.compute_mode)) : nullptr;
    x["mig_mode"] = g.mig ? nlohmann::ordered_json(g.mig->current) : nullptr;
    x["cuda_capability"] = g.capability ? nlohmann::ordered_json(std::to_string(g.capability->first) + "." +
                                                                 std::to_string(g.capability->second))
                                        : nullptr;
    nlohmann::ordered_json procs = nullptr;
    if (g.processes) {
      procs = nlohmann::ordered_json::array();
      for (size_t i = 0; i < g.processes->size(); ++i)
        procs.push_back({{"pid", (*g.processes)[i].pid}, {"type", g.process_types[i]}, {"name", g.process_names[i]},
                         {"used_bytes", j((*g.processes)[i].used_bytes)}, {"gone", bool(g.process_gone[i])}});
    }
    x["processes"] = procs;
    out["gpus"].push_back(x);
  }
  out["cuda"] = {{"device_order", r.cuda.order},
                 {"order_estimated", r.cuda.order_estimated},
                 {"cuda_visible_devices", j(r.cuda.visible_env)},
                 {"visible", r.cuda.visible}};
  out["warnings"] = r.warnings;
  return out;
}

}  // namespace gpumem::monitor
