// memory_stats() keys and memory_summary()'s table, laid out as torch.cuda.memory_summary() does.
#include <cstdio>
#include <string>
#include <vector>

#include "gpumem/allocator.hpp"

namespace gpumem {
namespace {
const char* const kPoolNames[3] = {"all", "small_pool", "large_pool"};

struct Metric {
  const char* key;
  const char* title;
  const StatArray DeviceStats::*stats;
  bool bytes;
};
const Metric kMetrics[] = {
    {"allocated_bytes", "Allocated memory", &DeviceStats::allocated_bytes, true},
    {"active_bytes", "Active memory", &DeviceStats::active_bytes, true},
    {"requested_bytes", "Requested memory", &DeviceStats::requested_bytes, true},
    {"reserved_bytes", "GPU reserved memory", &DeviceStats::reserved_bytes, true},
    {"inactive_split_bytes", "Non-releasable memory", &DeviceStats::inactive_split_bytes, true},
    {"allocation", "Allocations", &DeviceStats::allocation, false},
    {"active", "Active allocs", &DeviceStats::active, false},
    {"segment", "GPU reserved segments", &DeviceStats::segment, false},
    {"inactive_split", "Non-releasable allocs", &DeviceStats::inactive_split, false},
};

// The unit is chosen from the reference value (the "all" row), as PyTorch does, so columns line up.
std::string format_size(std::int64_t size, std::int64_t reference) {
  static const char* const prefixes[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int p = 0;
  double ref = double(reference);
  while (p < 5 && ref >= 768 * 1024) {
    ++p;
    size /= 1024;
    ref /= 1024;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%6lld %s", static_cast<long long>(size), prefixes[p]);
  return buf;
}

std::string format_count(std::int64_t count, std::int64_t reference) {
  static const char* const prefixes[] = {" ", "K", "M"};
  int p = 0;
  double ref = double(reference);
  while (p < 2 && ref >= 750 * 1000) {
    ++p;
    count /= 1000;
    ref /= 1000;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%7lld %s ", static_cast<long long>(count), prefixes[p]);
  return buf;
}

std::string centered(const std::string& text, std::size_t width) {
  if (text.size() >= width) return text;
  std::size_t left = (width - text.size()) / 2;
  return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
}
}  // namespace

std::map<std::string, std::int64_t> DeviceStats::as_map() const {
  std::map<std::string, std::int64_t> out;
  for (const Metric& m : kMetrics) {
    const StatArray& a = this->*m.stats;
    for (int k = 0; k < 3; ++k) {
      std::string prefix = std::string(m.key) + "." + kPoolNames[k] + ".";
      out[prefix + "current"] = a[k].current;
      out[prefix + "peak"] = a[k].peak;
      out[prefix + "allocated"] = a[k].allocated;
      out[prefix + "freed"] = a[k].freed;
    }
  }
  out["num_alloc_retries"] = num_alloc_retries;
  out["num_ooms"] = num_ooms;
  out["num_device_alloc"] = num_device_alloc;
  out["num_device_free"] = num_device_free;
  out["num_sync_all_streams"] = num_sync_all_streams;
  out["max_split_size"] = max_split_size;
  // PyTorch splits no "oversize" blocks out when max_split_size is unlimited; neither does gpumem.
  for (const char* key : {"oversize_allocations", "oversize_segments"})
    for (const char* m : {"current", "peak", "allocated", "freed"}) out[std::string(key) + "." + m] = 0;
  out["gpumem.num_maps"] = num_maps;
  out["gpumem.num_unmaps"] = num_unmaps;
  out["gpumem.num_invalid_frees"] = num_invalid_frees;
  const std::pair<const char*, const DriverCalls*> driver[] = {
      {"create", &driver_create}, {"map", &driver_map},         {"access", &driver_access},
      {"unmap", &driver_unmap},   {"release", &driver_release}, {"sync", &driver_sync}};
  for (const auto& [kind, d] : driver) {
    out[std::string("gpumem.driver.") + kind + ".calls"] = d->calls;
    out[std::string("gpumem.driver.") + kind + ".us"] = d->ns / 1000;
  }
  out["gpumem.ahead.pages"] = ahead.calls;
  out["gpumem.ahead.us"] = ahead.ns / 1000;
  out["gpumem.ahead.unused"] = ahead_unused;
  out["gpumem.ahead.held_bytes"] = ahead_held_bytes;
  out["gpumem.ahead.held_peak_bytes"] = ahead_held_peak_bytes;
  return out;
}

std::string Allocator::memory_summary(bool abbreviated) const {
  DeviceStats s = stats();
  const std::string rule(75, '-'), double_rule(75, '=');
  std::vector<std::string> lines;
  lines.push_back(double_rule);
  lines.push_back(centered("gpumem memory summary, device ID " + std::to_string(backend().device()), 75));
  lines.push_back(rule);
  char buf[160];
  std::snprintf(buf, sizeof buf, "            CUDA OOMs: %-12lld |        cudaMalloc retries: %-8lld  ",
                static_cast<long long>(s.num_ooms), static_cast<long long>(s.num_alloc_retries));
  lines.push_back(buf);
  lines.push_back(double_rule);
  lines.push_back("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");
  auto row = [&](const char* name, const Stat& st, const Stat& ref, bool bytes) {
    auto f = bytes ? format_size : format_count;
    std::snprintf(buf, sizeof buf, " %-21s | %s | %s | %s | %s ", name, f(st.current, ref.current).c_str(),
                  f(st.peak, ref.peak).c_str(), f(st.allocated, ref.allocated).c_str(),
                  f(st.freed, ref.freed).c_str());
    lines.push_back(buf);
  };
  for (const Metric& m : kMetrics) {
    lines.push_back(rule);
    const StatArray& a = s.*m.stats;
    row(m.title, a[kAggregatePool], a[kAggregatePool], m.bytes);
    if (!abbreviated) {
      row("      from large pool", a[kLargePool], a[kAggregatePool], m.bytes);
      row("      from small pool", a[kSmallPool], a[kAggregatePool], m.bytes);
    }
  }
  lines.push_back(rule);
  Stat zero;
  row("Oversize allocations", zero, zero, false);
  row("Oversize GPU segments", zero, zero, false);
  lines.push_back(double_rule);
  std::string out;
  for (const std::string& l : lines) out += "|" + l + "|\n";
  return out;
}

}  // namespace gpumem
