#include "monitor/ps.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string_view>

#include "gpumem/printable.hpp"

namespace gpumem::monitor {

bool is_driver_daemon(const ProcInfo& p) {
  // The name alone is anyone's to choose (a job renamed nvidia-smi would escape `kill --gpu`): a daemon
  // also runs as root or as a user of the driver's own (nvidia-persistenced's --user).
  if (p.uid != 0 && p.user.rfind("nvidia", 0) != 0) return false;
  // comm is cut to 15 characters by the kernel: "nvidia-persistenced" reads "nvidia-persiste".
  for (std::string_view name : {"nvidia-persistenced", "nv-hostengine", "nvidia-smi", "dcgm-exporter", "nvidia-fabricmanager"})
    if (p.comm == name.substr(0, 15)) return true;
  return false;
}

PsReport collect_ps(const nvml::Nvml& nvml, const std::vector<GpuRef>& gpus, const std::string& dev_dir) {
  PsReport report;
  std::map<unsigned, unsigned> gpu_of_minor;
  std::map<std::pair<unsigned, int>, size_t> entry_of;  // (gpu, pid) -> entries index
  for (const GpuRef& ref : gpus) {
    PsGpu g;
    g.index = ref.index;
    if (!ref.device) {
      g.error = nvml.error_string(ref.status);
      report.gpus.push_back(g);
      continue;
    }
    if (auto n = nvml.name(ref.device)) g.name = *n;
    if (auto u = nvml.uuid(ref.device)) g.uuid = *u;
    auto mem = nvml.memory(ref.device);
    if (mem) g.used_bytes = mem->used;
    auto minor = nvml.minor_number(ref.device);
    gpu_of_minor[minor ? *minor : ref.index] = ref.index;
    for (bool graphics : {false, true}) {
      auto procs = graphics ? nvml.graphics_processes(ref.device) : nvml.compute_processes(ref.device);
      if (!procs) {
        if (!graphics) g.error = "process list unavailable: " + nvml.error_string(procs.status);
        continue;
      }
      for (const nvml::GpuProcess& p : *procs) {
        auto key = std::make_pair(ref.index, static_cast<int>(p.pid));
        auto it = entry_of.find(key);
        if (it != entry_of.end()) {  // in both lists: one context serving compute and graphics
          report.entries[it->second].type = "C+G";
          continue;
        }
        PsEntry e;
        e.pid = static_cast<int>(p.pid);
        e.gpu = ref.index;
        e.type = graphics ? "G" : "C";
        e.used_bytes = p.used_bytes;
        if (p.used_bytes) g.process_bytes += *p.used_bytes;
        e.proc = read_process(e.pid);
        e.kind = e.proc ? PsKind::kContext : PsKind::kGone;
        entry_of[key] = report.entries.size();
        report.entries.push_back(std::move(e));
      }
    }
    report.gpus.push_back(g);
  }

  HolderScan scan = scan_device_holders(dev_dir);
  report.unreadable_fd_dirs = scan.unreadable;
  const int self = static_cast<int>(getpid());
  for (const DeviceHolder& h : scan.holders) {
    auto g = gpu_of_minor.find(h.minor);
    if (g == gpu_of_minor.end()) continue;  // a GPU not selected (or not known to NVML)
    auto key = std::make_pair(g->second, h.pid);
    auto it = entry_of.find(key);
    if (it != entry_of.end()) {
      report.entries[it->second].nodes.push_back(h.node);
      continue;
    }
    if (h.pid == self) continue;  // NVML itself opened the node for this query
    PsEntry e;
    e.pid = h.pid;
    e.gpu = g->second;
    e.kind = PsKind::kNoContext;
    e.type = "-";
    e.proc = read_process(h.pid);
    if (!e.proc) continue;  // exited since the scan
    e.nodes.push_back(h.node);
    entry_of[key] = report.entries.size();
    report.entries.push_back(std::move(e));
  }
  std::stable_sort(report.entries.begin(), report.entries.end(), [](const PsEntry& a, const PsEntry& b) {
    if (a.gpu != b.gpu) return a.gpu < b.gpu;
    if (a.kind != b.kind) return a.kind < b.kind;
    return a.pid < b.pid;
  });
  return report;
}

namespace {

std::string mib_text(const std::optional<unsigned long long>& bytes) {
  return bytes ? std::to_string(to_mib(*bytes)) + " MiB" : "-";
}

std::string note_of(const PsEntry& e) {
  switch (e.kind) {
    case PsKind::kGone: return "[NVML lists it but the process no longer exists]";
    case PsKind::kNoContext:
      return "[holds " + (e.nodes.empty() ? std::string("a GPU device") : e.nodes.front()) +
             (e.proc && is_driver_daemon(*e.proc) ? ", driver daemon]" : " without a CUDA context]");
    default: return {};
  }
}

std::string command_of(const PsEntry& e) {
  if (!e.proc) return "";
  std::string c = e.proc->cmdline.empty() ? "[" + e.proc->comm + "]" : e.proc->cmdline;
  c = printable(c);  // a name must not drive the terminal
  if (c.size() > 60) c = c.substr(0, 57) + "...";
  return c;
}

}  // namespace

std::string render_ps(const PsReport& r) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-4s %8s  %-10s %-4s %11s  %-12s %s\n", "GPU", "PID", "USER", "TYPE", "GPU MEMORY",
                "CONTAINER", "COMMAND");
  out += line;
  for (const PsEntry& e : r.entries) {
    std::string user = e.proc ? printable(e.proc->user) : "?";
    std::string container = "-";
    if (e.proc && !e.proc->container.empty()) {
      container = printable(e.proc->container);
      if (auto inner = e.proc->inner_pid()) container += ":" + std::to_string(*inner);
    }
    std::string cmd = command_of(e);
    std::string note = note_of(e);
    if (!note.empty()) cmd = cmd.empty() ? note : cmd + "  " + note;
    std::snprintf(line, sizeof line, "%-4u %8d  %-10.10s %-4s %11s  %-12.17s %s\n", e.gpu, e.pid, user.c_str(),
                  e.type.c_str(), mib_text(e.used_bytes).c_str(), container.c_str(), cmd.c_str());
    out += line;
  }
  if (r.entries.empty()) out += "No process uses the selected GPUs.\n";
  out += "\n";
  for (const PsGpu& g : r.gpus) {
    if (!g.error.empty() && !g.used_bytes) {
      out += "GPU " + std::to_string(g.index) + ": " + g.error + "\n";
      continue;
    }
    long long unexplained = g.used_bytes ? static_cast<long long>(to_mib(*g.used_bytes)) -
                                               static_cast<long long>(to_mib(g.process_bytes))
                                         : 0;
    // Processes may report more than the GPU's used memory (NVML reads them at other instants): said as
    // such, not as a negative amount nobody can explain.
    char rest[96];
    if (!g.used_bytes) std::snprintf(rest, sizeof rest, "unexplained -");  // used is unknown: so is the rest
    else if (unexplained >= 0) std::snprintf(rest, sizeof rest, "unexplained %lld MiB", unexplained);
    else std::snprintf(rest, sizeof rest, "processes report %lld MiB more than used", -unexplained);
    std::snprintf(line, sizeof line, "GPU %u (%s): used %s, by processes %llu MiB, %s%s\n", g.index,
                  printable(g.name).c_str(), mib_text(g.used_bytes).c_str(), to_mib(g.process_bytes), rest,
                  g.error.empty() ? "" : ("; " + g.error).c_str());
    out += line;
  }
  if (r.unreadable_fd_dirs)
    out += "Note: the open files of " + std::to_string(r.unreadable_fd_dirs) +
           " processes could not be read (run as root to see every device-node holder).\n";
  return out;
}

nlohmann::ordered_json ps_json(const PsReport& r) {
  nlohmann::ordered_json j;
  j["processes"] = nlohmann::ordered_json::array();
  for (const PsEntry& e : r.entries) {
    nlohmann::ordered_json p;
    p["gpu"] = e.gpu;
    p["pid"] = e.pid;
    p["kind"] = e.kind == PsKind::kContext ? "context" : e.kind == PsKind::kNoContext ? "no_context" : "gone";
    p["type"] = e.type;
    p["used_memory_bytes"] = e.used_bytes ? nlohmann::ordered_json(*e.used_bytes) : nullptr;
    p["user"] = e.proc ? nlohmann::ordered_json(e.proc->user) : nullptr;
    p["uid"] = e.proc ? nlohmann::ordered_json(e.proc->uid) : nullptr;
    p["command"] = e.proc ? nlohmann::ordered_json(e.proc->cmdline) : nullptr;
    p["container"] = e.proc && !e.proc->container.empty() ? nlohmann::ordered_json(e.proc->container) : nullptr;
    auto inner = e.proc ? e.proc->inner_pid() : std::nullopt;
    p["container_pid"] = inner ? nlohmann::ordered_json(*inner) : nullptr;
    p["device_nodes"] = e.nodes;
    p["driver_daemon"] = e.proc && is_driver_daemon(*e.proc);
    j["processes"].push_back(p);
  }
  j["gpus"] = nlohmann::ordered_json::array();
  for (const PsGpu& g : r.gpus) {
    nlohmann::ordered_json x;
    x["index"] = g.index;
    x["name"] = g.name.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(g.name);  // a lost GPU: unknown
    x["uuid"] = g.uuid.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(g.uuid);
    x["used_bytes"] = g.used_bytes ? nlohmann::ordered_json(*g.used_bytes) : nullptr;
    x["process_bytes"] = g.process_bytes;
    x["unexplained_bytes"] = g.used_bytes ? nlohmann::ordered_json(static_cast<long long>(*g.used_bytes) -
                                                                   static_cast<long long>(g.process_bytes))
                                          : nullptr;
    x["error"] = g.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(g.error);
    j["gpus"].push_back(x);
  }
  j["unreadable_fd_dirs"] = r.unreadable_fd_dirs;
  return j;
}

}  // namespace gpumem::monitor
