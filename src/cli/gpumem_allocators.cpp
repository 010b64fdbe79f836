// gpumem processes among NVML's: one stats request each (short timeout: ps must stay fast).
#include "cli/gpumem_allocators.hpp"

#include <map>
#include <set>

#include <fmt/format.h>

#include "control/client.hpp"
#include "gpumem/errors.hpp"

namespace gpumem::cli {

std::vector<AllocatorRow> gpumem_allocators(const std::vector<NvmlCharge>& charges) {
  std::set<int> with_socket;
  for (const auto& p : control::list_processes(true)) with_socket.insert(p.pid);
  std::map<int, unsigned long long> used;
  for (const auto& c : charges)
    if (with_socket.count(c.pid)) used[c.pid] += c.used_bytes;
  std::vector<AllocatorRow> rows;
  for (const auto& [pid, bytes] : used) {
    try {
      control::ProcessReport r = control::stats(pid, std::chrono::milliseconds(300));
      AllocatorRow row{pid, 0, 0, 0, bytes};
      for (const auto& d : r.devices) {
        row.allocated += d.allocated_bytes;
        row.reserved += d.reserved_bytes;
        row.peak_allocated += d.allocated_peak_bytes;
      }
      rows.push_back(row);
    } catch (const control::ControlError&) {
      // not answering in time or not ours: ps shows NVML's view only
    }
  }
  return rows;
}

std::string render_allocators(const std::vector<AllocatorRow>& rows) {
  if (rows.empty()) return {};
  auto b = [](long long v) { return v < 0 ? "-" + format_bytes(std::size_t(-v)) : format_bytes(std::size_t(v)); };
  std::string out = fmt::format("\ngpumem allocators:\n{:>8} {:>12} {:>12} {:>12} {:>12} {:>16}\n", "PID", "ALLOCATED",
                                "RESERVED", "PEAK", "NVML USED", "BEYOND RESERVED");
  for (const auto& r : rows)
    out += fmt::format("{:>8} {:>12} {:>12} {:>12} {:>12} {:>16}\n", r.pid, b(r.allocated), b(r.reserved),
                       b(r.peak_allocated), b((long long)r.nvml_used), b(r.beyond_reserved()));
  return out;
}

nlohmann::ordered_json allocators_json(const std::vector<AllocatorRow>& rows) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& r : rows)
    j.push_back({{"pid", r.pid},
                 {"allocated_bytes", r.allocated},
                 {"reserved_bytes", r.reserved},
                 {"allocated_peak_bytes", r.peak_allocated},
                 {"nvml_used_bytes", r.nvml_used},
                 {"beyond_reserved_bytes", r.beyond_reserved()}});
  return j;
}

}  // namespace gpumem::cli
