#include "monitor/common.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>

namespace gpumem::monitor {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string timestamp_now() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[40];
  size_t n = std::strftime(buf, sizeof buf, "%Y/%m/%d %H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03lld", static_cast<long long>(ms));
  return buf;
}

std::string cuda_version_text(int v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d.%d", v / 1000, (v % 1000) / 10);
  return buf;
}

namespace {
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}
}  // namespace

namespace {
// A PCI bus id as numbers: "[domain:]bus:device.function" in hex, as NVML ("00000000:18:00.0"), nvidia-smi
// and lspci ("18:00.0", "0000:18:00.0") write it; nullopt if `id` is not one.
std::optional<std::array<unsigned long, 4>> parse_bus_id(const std::string& id) {
  std::array<unsigned long, 4> v{};  // domain, bus, device, function
  const std::vector<std::string> parts = split(id, ':');
  if (parts.size() < 2 || parts.size() > 3) return std::nullopt;
  const std::string& last = parts.back();
  const std::size_t dot = last.find('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::string fields[4] = {parts.size() == 3 ? parts[0] : "0", parts[parts.size() - 2], last.substr(0, dot), last.substr(dot + 1)};
  for (int i = 0; i < 4; ++i) {
    if (fields[i].empty() || fields[i].size() > 8 || !std::all_of(fields[i].begin(), fields[i].end(), [](unsigned char c) { return std::isxdigit(c); }))
      return std::nullopt;
    v[std::size_t(i)] = std::stoul(fields[i], nullptr, 16);
  }
  return v;
}
}  // namespace

bool same_bus_id(const std::string& nvml_bus_id, const std::string& id) {
  auto a = parse_bus_id(nvml_bus_id), b = parse_bus_id(id);
  return a && b && *a == *b;
}

std::vector<GpuRef> select_gpus(const nvml::Nvml& nvml, const std::string& ids) {
  auto count = nvml.device_count();
  if (!count) throw NoSuchGpuError("NVML could not count the GPUs: " + nvml.error_string(count.status) + ".");
  if (*count == 0) throw NoSuchGpuError("No GPUs were found.");
  // Getting a handle attaches the GPU inside NVML (~6.5 ms each on an H200): only for GPUs we need.
  auto ref = [&](unsigned i) {
    auto d = nvml.device(i);
    return GpuRef{i, d ? *d : nullptr, d ? nvml::abi::kSuccess : d.status};
  };
  std::vector<GpuRef> all;
  auto everything = [&]() -> const std::vector<GpuRef>& {
    if (all.empty())
      for (unsigned i = 0; i < *count; ++i) all.push_back(ref(i));
    return all;
  };
  if (trim(ids).empty()) return everything();
  std::vector<GpuRef> out;
  for (const std::string& raw : split(ids, ',')) {
    std::string id = trim(raw);
    std::optional<GpuRef> match;
    bool numeric = !id.empty() && std::all_of(id.begin(), id.end(), [](unsigned char c) { return std::isdigit(c); });
    if (numeric) {
      unsigned long v = id.size() < 10 ? std::stoul(id) : ~0ul;
      if (v < *count) match = ref(static_cast<unsigned>(v));
    } else {
      for (const GpuRef& g : everything()) {
        if (!g.device) continue;
        auto uuid = nvml.uuid(g.device);
        auto bus = nvml.pci_bus_id(g.device);
        if ((uuid && upper(*uuid) == upper(id)) || (bus && same_bus_id(*bus, id))) {
          match = g;
          break;
        }
      }
    }
    if (!match) throw NoSuchGpuError("No GPU matches id '" + id + "' (give an index, a UUID or a PCI bus id).");
    if (std::none_of(out.begin(), out.end(), [&](const GpuRef& g) { return g.index == match->index; }))
      out.push_back(*match);  // "-i 0,0" or an index and the same GPU's UUID: each GPU once
  }
  return out;
}

}  // namespace gpumem::monitor
