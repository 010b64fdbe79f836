#include "monitor/query.hpp"

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>

#include "monitor/gpu_view.hpp"

namespace gpumem::monitor {

using nvml::Reading;
namespace abi = nvml::abi;

namespace {

// One printed value: text without unit ("80") or a bracketed failure ("[N/A]"); JSON null on failure.
struct Cell {
  std::string text;
  bool ok = false;
  nlohmann::ordered_json json;
  bool unsupported = false;  // the GPU will never have this value: a loop need not ask again
};

template <class T>
Cell failure(const nvml::Nvml& nvml, const Reading<T>& r) {
  if (r.not_supported()) return Cell{"[N/A]", false, nullptr, true};
  return Cell{"[" + nvml.error_string(r.status) + "]", false, nullptr};
}

Cell text_cell(const std::string& s) { return Cell{s, true, s}; }

template <class T>
Cell number_cell(const nvml::Nvml& nvml, const Reading<T>& r) {
  if (!r) return failure(nvml, r);
  return Cell{std::to_string(*r), true, *r};
}

Cell watts_cell(const nvml::Nvml& nvml, const Reading<unsigned>& r) {
  if (!r) return failure(nvml, r);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", *r / 1000.0);
  return Cell{buf, true, std::stod(buf)};
}

Cell enabled_cell(const nvml::Nvml& nvml, const Reading<bool>& r) {
  if (!r) return failure(nvml, r);
  return text_cell(*r ? "Enabled" : "Disabled");
}

using MemPick = std::function<std::optional<unsigned long long>(const nvml::MemoryInfo&)>;
Cell memory_cell(GpuView& g, const MemPick& pick) {
  const auto& m = g.memory();
  if (!m) return failure(g.nvml(), m);
  auto v = pick(*m);
  if (!v) return Cell{"[N/A]", false, nullptr};  // reserved without nvmlDeviceGetMemoryInfo_v2
  return Cell{std::to_string(to_mib(*v)), true, to_mib(*v)};
}

}  // namespace

// How often a loop re-reads a field: every sample, once (identity, hardware maxima), or once a
// second (settings an administrator may change: reading the power limit costs ~175 us on an H200,
// the maximum SM clock ~1.6 ms, while the live values cost ~0.5 us each).
enum class Refresh { kEverySample, kOnce, kEverySecond };

struct QueryField {
  const char* name;
  std::vector<const char*> aliases;
  const char* unit;  // nullptr: none
  std::function<Cell(GpuView&)> gpu;
  std::function<Cell(GpuView&, const nvml::GpuProcess&)> app;
  Refresh refresh = Refresh::kEverySample;
};

struct QueryCache::Impl {
  struct Entry {
    Cell cell;
    std::chrono::steady_clock::time_point read_at;
  };
  std::map<std::pair<unsigned, const QueryField*>, Entry> entries;
};
QueryCache::QueryCache() : impl_(std::make_unique<Impl>()) {}
QueryCache::~QueryCache() = default;

namespace {

Cell string_reading(GpuView& g, const Reading<std::string>& r) { return r ? text_cell(*r) : failure(g.nvml(), r); }

// A device read that reports the handle's failure when the GPU has none.
template <class F>
auto on_device(GpuView& g, F read) -> decltype(read(g.nvml(), g.device())) {
  using R = decltype(read(g.nvml(), g.device()));
  return g.lost() ? R::fail(g.handle_status()) : read(g.nvml(), g.device());
}

Cell uint_cell(GpuView& g, nvml::abi::Return (*nvml::Functions::*fn)(nvml::abi::Device, unsigned*)) {
  return number_cell(g.nvml(), on_device(g, [fn](const nvml::Nvml& n, nvml::abi::Device d) { return n.uint_property(d, fn); }));
}

Cell enabled_uint_cell(GpuView& g, nvml::abi::Return (*nvml::Functions::*fn)(nvml::abi::Device, unsigned*)) {
  auto r = on_device(g, [fn](const nvml::Nvml& n, nvml::abi::Device d) { return n.uint_property(d, fn); });
  return r ? text_cell(*r ? "Enabled" : "Disabled") : failure(g.nvml(), r);
}

Cell watts_uint_cell(GpuView& g, nvml::abi::Return (*nvml::Functions::*fn)(nvml::abi::Device, unsigned*)) {
  return watts_cell(g.nvml(), on_device(g, [fn](const nvml::Nvml& n, nvml::abi::Device d) { return n.uint_property(d, fn); }));
}

Cell limit_constraint_cell(GpuView& g, bool max) {
  auto r = on_device(g, [](const nvml::Nvml& n, nvml::abi::Device d) { return n.power_limit_constraints_mw(d); });
  if (!r) return failure(g.nvml(), r);
  return watts_cell(g.nvml(), Reading<unsigned>::ok(max ? r->second : r->first));
}

// nvidia-smi's clocks_event_reasons.* (clocks_throttle_reasons.* before driver 535): one bit each.
Cell event_reason_cell(GpuView& g, unsigned long long bit) {
  auto r = on_device(g, [](const nvml::Nvml& n, nvml::abi::Device d) { return n.clocks_event_reasons(d); });
  if (!r) return failure(g.nvml(), r);
  if (!bit) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%016llX", *r);
    return Cell{buf, true, buf};
  }
  return text_cell(*r & bit ? "Active" : "Not Active");
}

const std::vector<QueryField>& gpu_fields() {
  static const std::vector<QueryField> table = {
      {"timestamp", {}, nullptr, [](GpuView& g) { return text_cell(g.timestamp()); }, {}},
      {"driver_version", {}, nullptr,
       [](GpuView& g) { auto r = g.nvml().driver_version(); return r ? text_cell(*r) : failure(g.nvml(), r); }, {}, Refresh::kOnce},
      {"count", {}, nullptr, [](GpuView& g) { return number_cell(g.nvml(), g.nvml().device_count()); }, {}},
      {"name", {"gpu_name"}, nullptr, [](GpuView& g) { return string_reading(g, g.name()); }, {}, Refresh::kOnce},
      {"pci.bus_id", {"gpu_bus_id"}, nullptr, [](GpuView& g) { return string_reading(g, g.bus_id()); }, {}, Refresh::kOnce},
      {"uuid", {"gpu_uuid"}, nullptr, [](GpuView& g) { return string_reading(g, g.uuid()); }, {}, Refresh::kOnce},
      {"index", {}, nullptr, [](GpuView& g) { return Cell{std::to_string(g.index()), true, g.index()}; }, {}},
      {"pstate", {}, nullptr,
       [](GpuView& g) {
         auto r = g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().pstate(g.device());
         return r ? text_cell("P" + std::to_string(*r)) : failure(g.nvml(), r);
       }, {}},
      {"temperature.gpu", {}, nullptr,
       [](GpuView& g) { return number_cell(g.nvml(), g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().temperature(g.device())); }, {}},
      {"temperature.memory", {}, nullptr,
       [](GpuView& g) { return number_cell(g.nvml(), g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().memory_temperature(g.device())); }, {}},
      {"utilization.gpu", {}, "%",
       [](GpuView& g) {
         const auto& u = g.utilization();
         return u ? Cell{std::to_string(u->gpu), true, u->gpu} : failure(g.nvml(), u);
       }, {}},
      {"utilization.memory", {}, "%",
       [](GpuView& g) {
         const auto& u = g.utilization();
         return u ? Cell{std::to_string(u->memory), true, u->memory} : failure(g.nvml(), u);
       }, {}},
      {"memory.total", {}, "MiB", [](GpuView& g) { return memory_cell(g, [](const nvml::MemoryInfo& m) { return std::optional(m.total); }); }, {}},
      {"memory.reserved", {}, "MiB", [](GpuView& g) { return memory_cell(g, [](const nvml::MemoryInfo& m) { return m.reserved; }); }, {}},
      {"memory.used", {}, "MiB", [](GpuView& g) { return memory_cell(g, [](const nvml::MemoryInfo& m) { return std::optional(m.used); }); }, {}},
      {"memory.free", {}, "MiB", [](GpuView& g) { return memory_cell(g, [](const nvml::MemoryInfo& m) { return std::optional(m.free); }); }, {}},
      {"power.draw", {}, "W",
       [](GpuView& g) { return watts_cell(g.nvml(), g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().power_mw(g.device())); }, {}},
      {"power.limit", {}, "W",
       [](GpuView& g) { return watts_cell(g.nvml(), g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().power_limit_mw(g.device())); }, {}, Refresh::kEverySecond},
      {"clocks.current.graphics", {"clocks.gr"}, "MHz",
       [](GpuView& g) { return number_cell(g.nvml(), g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().clock_mhz(g.device(), abi::kClockGraphics)); }, {}},
      {"clocks.current.sm", {"clocks.sm"}, "MHz",
       [](GpuView& g) { return number_cell(g.nvml(), g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().clock_mhz(g.device(), abi::kClockSm)); }, {}},
      {"clocks.current.memory", {"clocks.mem"}, "MHz",
       [](GpuView& g) { return number_cell(g.nvml(), g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().clock_mhz(g.device(), abi::kClockMem)); }, {}},
      {"clocks.max.graphics", {"clocks.max.gr"}, "MHz",
       [](GpuView& g) { return number_cell(g.nvml(), g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().max_clock_mhz(g.device(), abi::kClockGraphics)); }, {}, Refresh::kOnce},
      {"clocks.max.sm", {}, "MHz",
       [](GpuView& g) { return number_cell(g.nvml(), g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().max_clock_mhz(g.device(), abi::kClockSm)); }, {}, Refresh::kOnce},
      {"clocks.max.memory", {"clocks.max.mem"}, "MHz",
       [](GpuView& g) { return number_cell(g.nvml(), g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().max_clock_mhz(g.device(), abi::kClockMem)); }, {}, Refresh::kOnce},
      {"fan.speed", {}, "%",
       [](GpuView& g) { return number_cell(g.nvml(), g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().fan_percent(g.device())); }, {}},
      {"persistence_mode", {}, nullptr,
       [](GpuView& g) { return enabled_cell(g.nvml(), g.lost() ? Reading<bool>::fail(g.handle_status()) : g.nvml().persistence_mode(g.device())); }, {}, Refresh::kEverySecond},
      {"compute_mode", {}, nullptr,
       [](GpuView& g) {
         auto r = g.lost() ? Reading<unsigned>::fail(g.handle_status()) : g.nvml().compute_mode(g.device());
         return r ? text_cell(nvml::compute_mode_name(*r)) : failure(g.nvml(), r);
       }, {}, Refresh::kEverySecond},
      {"ecc.mode.current", {}, nullptr,
       [](GpuView& g) {
         auto r = g.lost() ? Reading<nvml::EnableMode>::fail(g.handle_status()) : g.nvml().ecc_mode(g.device());
         return r ? text_cell(r->current ? "Enabled" : "Disabled") : failure(g.nvml(), r);
       }, {}, Refresh::kEverySecond},
      {"ecc.errors.uncorrected.volatile.total", {}, nullptr,
       [](GpuView& g) { return number_cell(g.nvml(), g.lost() ? Reading<unsigned long long>::fail(g.handle_status()) : g.nvml().ecc_errors(g.device(), abi::kEccUncorrected, abi::kEccVolatile)); }, {}},
      {"ecc.errors.corrected.volatile.total", {}, nullptr,
       [](GpuView& g) { return number_cell(g.nvml(), g.lost() ? Reading<unsigned long long>::fail(g.handle_status()) : g.nvml().ecc_errors(g.device(), abi::kEccCorrected, abi::kEccVolatile)); }, {}},
      {"mig.mode.current", {}, nullptr,
       [](GpuView& g) {
         auto r = g.lost() ? Reading<nvml::EnableMode>::fail(g.handle_status()) : g.nvml().mig_mode(g.device());
         return r ? text_cell(r->current ? "Enabled" : "Disabled") : failure(g.nvml(), r);
       }, {}, Refresh::kEverySecond},
      {"vbios_version", {}, nullptr,
       [](GpuView& g) { return string_reading(g, on_device(g, [](const nvml::Nvml& n, abi::Device d) { return n.vbios_version(d); })); }, {}, Refresh::kOnce},
      {"serial", {"gpu_serial"}, nullptr,
       [](GpuView& g) { return string_reading(g, on_device(g, [](const nvml::Nvml& n, abi::Device d) { return n.serial(d); })); }, {}, Refresh::kOnce},
      // Deprecated by NVIDIA: nvidia-smi 580 prints this sentence instead of a value.
      {"display_mode", {}, nullptr, [](GpuView& g) {
         auto r = on_device(g, [](const nvml::Nvml& n, nvml::abi::Device d) {
           return n.uint_property(d, &nvml::Functions::display_mode);
         });
         return r.status == nvml::abi::kErrorGpuIsLost ? failure(g.nvml(), r)
                                                       : text_cell("[Requested functionality has been deprecated]");
       }, {}, Refresh::kOnce},
      {"display_active", {}, nullptr, [](GpuView& g) { return enabled_uint_cell(g, &nvml::Functions::display_active); }, {}, Refresh::kEverySecond},
      {"pcie.link.gen.current", {"pcie.link.gen.gpucurrent"}, nullptr, [](GpuView& g) { return uint_cell(g, &nvml::Functions::pcie_gen_current); }, {}},
      {"pcie.link.gen.max", {"pcie.link.gen.gpumax"}, nullptr, [](GpuView& g) { return uint_cell(g, &nvml::Functions::pcie_gen_max); }, {}, Refresh::kOnce},
      {"pcie.link.width.current", {}, nullptr, [](GpuView& g) { return uint_cell(g, &nvml::Functions::pcie_width_current); }, {}},
      {"pcie.link.width.max", {}, nullptr, [](GpuView& g) { return uint_cell(g, &nvml::Functions::pcie_width_max); }, {}, Refresh::kOnce},
      {"enforced.power.limit", {}, "W", [](GpuView& g) { return watts_uint_cell(g, &nvml::Functions::enforced_power_limit); }, {}, Refresh::kEverySecond},
      {"power.default_limit", {}, "W", [](GpuView& g) { return watts_uint_cell(g, &nvml::Functions::default_power_limit); }, {}, Refresh::kOnce},
      {"power.min_limit", {}, "W", [](GpuView& g) { return limit_constraint_cell(g, false); }, {}, Refresh::kOnce},
      {"power.max_limit", {}, "W", [](GpuView& g) { return limit_constraint_cell(g, true); }, {}, Refresh::kOnce},
      {"clocks_event_reasons.active", {"clocks_throttle_reasons.active"}, nullptr, [](GpuView& g) { return event_reason_cell(g, 0); }, {}},
      {"clocks_event_reasons.gpu_idle", {"clocks_throttle_reasons.gpu_idle"}, nullptr, [](GpuView& g) { return event_reason_cell(g, 0x1); }, {}},
      {"clocks_event_reasons.applications_clocks_setting", {"clocks_throttle_reasons.applications_clocks_setting"}, nullptr, [](GpuView& g) { return event_reason_cell(g, 0x2); }, {}},
      {"clocks_event_reasons.sw_power_cap", {"clocks_throttle_reasons.sw_power_cap"}, nullptr, [](GpuView& g) { return event_reason_cell(g, 0x4); }, {}},
      {"clocks_event_reasons.hw_slowdown", {"clocks_throttle_reasons.hw_slowdown"}, nullptr, [](GpuView& g) { return event_reason_cell(g, 0x8); }, {}},
      {"clocks_event_reasons.sync_boost", {"clocks_throttle_reasons.sync_boost"}, nullptr, [](GpuView& g) { return event_reason_cell(g, 0x10); }, {}},
      {"clocks_event_reasons.sw_thermal_slowdown", {"clocks_throttle_reasons.sw_thermal_slowdown"}, nullptr, [](GpuView& g) { return event_reason_cell(g, 0x20); }, {}},
      {"clocks_event_reasons.hw_thermal_slowdown", {"clocks_throttle_reasons.hw_thermal_slowdown"}, nullptr, [](GpuView& g) { return event_reason_cell(g, 0x40); }, {}},
      {"clocks_event_reasons.hw_power_brake_slowdown", {"clocks_throttle_reasons.hw_power_brake_slowdown"}, nullptr, [](GpuView& g) { return event_reason_cell(g, 0x80); }, {}},
      {"retired_pages.single_bit_ecc.count", {"retired_pages.sbe"}, nullptr,
       [](GpuView& g) { return number_cell(g.nvml(), on_device(g, [](const nvml::Nvml& n, abi::Device d) { return n.retired_pages(d, abi::kRetiredMultipleSbe); })); }, {}},
      {"retired_pages.double_bit.count", {"retired_pages.dbe"}, nullptr,
       [](GpuView& g) { return number_cell(g.nvml(), on_device(g, [](const nvml::Nvml& n, abi::Device d) { return n.retired_pages(d, abi::kRetiredDbe); })); }, {}},
      {"retired_pages.pending", {}, nullptr,
       [](GpuView& g) {
         auto r = on_device(g, [](const nvml::Nvml& n, abi::Device d) { return n.retired_pages_pending(d); });
         return r ? text_cell(*r ? "Yes" : "No") : failure(g.nvml(), r);
       }, {}},
      {"ecc.errors.corrected.aggregate.total", {}, nullptr,
       [](GpuView& g) { return number_cell(g.nvml(), on_device(g, [](const nvml::Nvml& n, abi::Device d) { return n.ecc_errors(d, abi::kEccCorrected, abi::kEccAggregate); })); }, {}},
      {"ecc.errors.uncorrected.aggregate.total", {}, nullptr,
       [](GpuView& g) { return number_cell(g.nvml(), on_device(g, [](const nvml::Nvml& n, abi::Device d) { return n.ecc_errors(d, abi::kEccUncorrected, abi::kEccAggregate); })); }, {}},
  };
  return table;
}

const std::vector<QueryField>& app_fields() {
  static const std::vector<QueryField> table = {
      {"timestamp", {}, nullptr, {}, [](GpuView& g, const nvml::GpuProcess&) { return text_cell(g.timestamp()); }},
      {"gpu_name", {}, nullptr, {}, [](GpuView& g, const nvml::GpuProcess&) { return string_reading(g, g.name()); }},
      {"gpu_bus_id", {}, nullptr, {}, [](GpuView& g, const nvml::GpuProcess&) { return string_reading(g, g.bus_id()); }},
      {"gpu_uuid", {}, nullptr, {}, [](GpuView& g, const nvml::GpuProcess&) { return string_reading(g, g.uuid()); }},
      {"pid", {}, nullptr, {}, [](GpuView&, const nvml::GpuProcess& p) { return Cell{std::to_string(p.pid), true, p.pid}; }},
      {"process_name", {"name"}, nullptr, {},
       [](GpuView& g, const nvml::GpuProcess& p) {
         auto r = g.nvml().process_name(p.pid);
         return r ? text_cell(*r) : failure(g.nvml(), r);
       }},
      {"used_gpu_memory", {"used_memory"}, "MiB", {},
       [](GpuView&, const nvml::GpuProcess& p) {
         if (!p.used_bytes) return Cell{"[N/A]", false, nullptr};
         return Cell{std::to_string(to_mib(*p.used_bytes)), true, to_mib(*p.used_bytes)};
       }},
  };
  return table;
}

QueryRequest parse_fields(const std::string& list, const std::vector<QueryField>& table, bool apps) {
  QueryRequest req;
  req.apps = apps;
  for (const std::string& raw : split(list, ',')) {
    std::string name = trim(raw);
    const QueryField* found = nullptr;
    for (const QueryField& f : table) {
      if (name == f.name) found = &f;
      for (const char* a : f.aliases)
        if (name == a) found = &f;
      if (found) break;
    }
    if (!found) throw UsageError("Field \"" + name + "\" is not a valid field to query.");
    req.fields.push_back({found, name});
  }
  return req;
}

// The units stay in the header with nounits, which strips them from the values only (nvidia-smi 580 on an
// H200: `memory.used [MiB]` over `0`).
std::string header_line(const QueryRequest& req) {
  std::string line;
  for (size_t i = 0; i < req.fields.size(); ++i) {
    const QueryField* f = req.fields[i].field;
    if (i) line += ", ";
    line += f->name;
    if (f->unit) line += std::string(" [") + f->unit + "]";
  }
  return line + "\n";
}

void append_csv(std::string& out, const std::vector<std::pair<const QueryField*, Cell>>& row, const QueryFormat& fmt) {
  for (size_t i = 0; i < row.size(); ++i) {
    if (i) out += ", ";
    out += row[i].second.text;
    if (fmt.units && row[i].second.ok && row[i].first->unit) out += std::string(" ") + row[i].first->unit;
  }
  out += "\n";
}

}  // namespace

QueryFormat parse_query_format(const std::string& spec) {
  QueryFormat fmt;
  bool base = false;
  for (const std::string& raw : split(spec, ',')) {
    std::string p = trim(raw);
    if (p == "csv") {
      base = true;
    } else if (p == "json") {
      base = true;
      fmt.json = true;
    } else if (p == "noheader") {
      fmt.header = false;
    } else if (p == "nounits") {
      fmt.units = false;
    } else {
      throw UsageError("Format modifier \"" + p + "\" is not recognized (use csv[,noheader][,nounits] or json).");
    }
  }
  if (!base) throw UsageError("--format needs csv or json.");
  return fmt;
}

QueryRequest parse_gpu_fields(const std::string& list) { return parse_fields(list, gpu_fields(), false); }
QueryRequest parse_app_fields(const std::string& list) { return parse_fields(list, app_fields(), true); }

std::vector<std::string> gpu_field_names() {
  std::vector<std::string> out;
  for (const auto& f : gpu_fields()) out.push_back(f.name);
  return out;
}
namespace {
std::vector<FieldName> field_list(const std::vector<QueryField>& table) {
  std::vector<FieldName> out;
  for (const auto& f : table) out.push_back({f.name, std::vector<std::string>(f.aliases.begin(), f.aliases.end())});
  return out;
}
}  // namespace
std::vector<FieldName> gpu_field_list() { return field_list(gpu_fields()); }
std::vector<FieldName> app_field_list() { return field_list(app_fields()); }

std::vector<std::string> app_field_names() {
  std::vector<std::string> out;
  for (const auto& f : app_fields()) out.push_back(f.name);
  return out;
}

std::string render_query(const nvml::Nvml& nvml, const std::vector<GpuRef>& gpus, const QueryRequest& req,
                         const QueryFormat& fmt, bool with_header, std::string* warnings, QueryCache* cache) {
  const std::string ts = timestamp_now();
  std::string out;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  if (!fmt.json && with_header && fmt.header) out += header_line(req);
  auto emit = [&](const std::vector<std::pair<const QueryField*, Cell>>& row) {
    if (fmt.json) {
      nlohmann::ordered_json obj = nlohmann::ordered_json::object();
      for (size_t i = 0; i < row.size(); ++i) obj[req.fields[i].given] = row[i].second.json;
      rows.push_back(std::move(obj));
    } else {
      append_csv(out, row, fmt);
    }
  };
  const auto now = std::chrono::steady_clock::now();
  auto read = [&](GpuView& g, const QueryField* f) -> Cell {
    if (!cache) return f->gpu(g);
    auto& entries = cache->impl().entries;
    auto key = std::make_pair(g.index(), f);
    auto it = entries.find(key);
    if (it != entries.end()) {
      const Cell& c = it->second.cell;
      bool fresh = c.unsupported || f->refresh == Refresh::kOnce ||
                   (f->refresh == Refresh::kEverySecond && now - it->second.read_at < std::chrono::seconds(1));
      if (fresh) return c;
    }
    Cell c = f->gpu(g);
    if (c.unsupported || (c.ok && f->refresh != Refresh::kEverySample)) entries[key] = QueryCache::Impl::Entry{c, now};
    return c;
  };
  for (const GpuRef& ref : gpus) {
    GpuView g(nvml, ref, ts);
    if (!req.apps) {
      std::vector<std::pair<const QueryField*, Cell>> row;
      for (const auto& s : req.fields) row.emplace_back(s.field, read(g, s.field));
      emit(row);
      continue;
    }
    const auto& procs = g.compute_processes();
    if (!procs) {  // no rows for this GPU; say why on the side so the CSV stays parseable
      if (warnings)
        *warnings += "GPU " + std::to_string(ref.index) + ": process list unavailable: " + nvml.error_string(procs.status) + "\n";
      continue;
    }
    for (const nvml::GpuProcess& p : *procs) {
      std::vector<std::pair<const QueryField*, Cell>> row;
      for (const auto& s : req.fields) row.emplace_back(s.field, s.field->app(g, p));
      emit(row);
    }
  }
  if (fmt.json) out = rows.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";  // names may not be UTF-8
  return out;
}

}  // namespace gpumem::monitor
