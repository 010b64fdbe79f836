#include "monitor/sampler.hpp"

#include <algorithm>
#include <map>

namespace gpumem::monitor {
namespace {

namespace abi = nvml::abi;

template <class T>
std::optional<T> opt(const nvml::Reading<T>& r) {
  return r.value;
}

void read_processes(const nvml::Nvml& nvml, const GpuRef& ref, GpuSample& s) {
  std::vector<ProcessSample> out;
  std::map<unsigned, size_t> at;  // pid -> out index
  for (bool graphics : {false, true}) {
    auto list = graphics ? nvml.graphics_processes(ref.device) : nvml.compute_processes(ref.device);
    if (!list) {
      if (!graphics) {  // the compute list is the one that matters; without it there is no table
        s.processes_error = nvml.error_string(list.status);
        return;
      }
      continue;
    }
    for (const nvml::GpuProcess& p : *list) {
      auto it = at.find(p.pid);
      if (it != at.end()) {
        (graphics ? out[it->second].graphics : out[it->second].compute) = true;
        continue;
      }
      ProcessSample ps;
      ps.gpu = ref.index;
      ps.pid = p.pid;
      ps.used_bytes = p.used_bytes;
      (graphics ? ps.graphics : ps.compute) = true;
      at[p.pid] = out.size();
      out.push_back(ps);
    }
  }
  s.processes = std::move(out);
}

// Share of the time between two readings of a violation counter (reference in us, violation in ns).
std::optional<unsigned> violation_percent(const nvml::ViolationCounter& before, const nvml::ViolationCounter& now) {
  if (now.reference_us <= before.reference_us || now.violation_ns < before.violation_ns) return std::nullopt;
  double share = double(now.violation_ns - before.violation_ns) / (double(now.reference_us - before.reference_us) * 1000.0);
  return static_cast<unsigned>(std::min(100.0, share * 100.0 + 0.5));
}

// Power and thermal violations since the previous reading of this GPU; the first reading only sets the base.
void read_violations(const nvml::Nvml& nvml, abi::Device d, Sampler::Impl& m, size_t i, GpuSample& s) {
  auto power = nvml.violation(d, abi::kPerfPolicyPower);
  auto thermal = nvml.violation(d, abi::kPerfPolicyThermal);
  if (power && m.power_viol[i]) s.power_violation_percent = violation_percent(*m.power_viol[i], *power);
  if (thermal && m.thermal_viol[i] && violation_percent(*m.thermal_viol[i], *thermal))
    s.thermal_violation = thermal->violation_ns > m.thermal_viol[i]->violation_ns;
  // A counter whose reference time has not moved keeps its base, so the next sample spans real time.
  auto keep_base = [](const auto& r, const std::optional<nvml::ViolationCounter>& base) {
    return r && base && r->reference_us <= base->reference_us;
  };
  if (!keep_base(power, m.power_viol[i])) m.power_viol[i] = power.value;
  if (!keep_base(thermal, m.thermal_viol[i])) m.thermal_viol[i] = thermal.value;
}

// %SM of each listed process: the newest sample since the previous call; a process without one was idle.
void read_process_utilization(const nvml::Nvml& nvml, abi::Device d, unsigned long long& seen_us, GpuSample& s) {
  if (!s.processes) return;
  auto util = nvml.process_utilization(d, seen_us);
  if (!util) return;  // not supported: the column stays "-"
  for (ProcessSample& p : *s.processes) {
    p.sm_percent = 0;
    for (const nvml::ProcessUtilization& u : *util)
      if (u.pid == p.pid) p.sm_percent = std::min(100u, u.sm_percent);
  }
  for (const nvml::ProcessUtilization& u : *util) seen_us = std::max(seen_us, u.timestamp_us);
}

}  // namespace

GpuSample sample_gpu(const nvml::Nvml& nvml, const GpuRef& ref, bool processes, bool extras,
                     Unsupported* unsupported) {
  GpuSample s;
  s.index = ref.index;
  if (!ref.device) {
    s.error = nvml.error_string(ref.status);
    return s;
  }
  auto d = ref.device;
  if (auto m = nvml.memory(d)) {
    s.memory_total = m->total;
    s.memory_used = m->used;
    s.memory_free = m->free;
    s.memory_reserved = m->reserved;
  } else if (m.status == abi::kErrorGpuIsLost) {
    s.error = nvml.error_string(m.status);  // every other call would say the same
    return s;
  }
  // One NVML read, unless the GPU refused it before; a refusal now is remembered.
  auto ask = [unsupported](SampleField f, auto call) -> decltype(call()) {
    const auto bit = static_cast<size_t>(f);
    if (unsupported && unsupported->test(bit)) return decltype(call())::fail(abi::kErrorNotSupported);
    auto r = call();
    if (unsupported && r.not_supported()) unsupported->set(bit);
    return r;
  };
  using F = SampleField;
  if (auto u = ask(F::kUtilization, [&] { return nvml.utilization(d); })) {
    s.util_gpu = u->gpu;
    s.util_memory = u->memory;
  }
  s.temperature = opt(ask(F::kTemperature, [&] { return nvml.temperature(d); }));
  s.power_mw = opt(ask(F::kPower, [&] { return nvml.power_mw(d); }));
  s.clock_graphics_mhz = opt(ask(F::kClockGraphics, [&] { return nvml.clock_mhz(d, abi::kClockGraphics); }));
  s.clock_sm_mhz = opt(ask(F::kClockSm, [&] { return nvml.clock_mhz(d, abi::kClockSm); }));
  s.clock_memory_mhz = opt(ask(F::kClockMemory, [&] { return nvml.clock_mhz(d, abi::kClockMem); }));
  s.fan_percent = opt(ask(F::kFan, [&] { return nvml.fan_percent(d); }));
  s.pstate = opt(ask(F::kPstate, [&] { return nvml.pstate(d); }));
  if (s.pstate && *s.pstate == abi::kPstateUnknown) s.pstate.reset();
  if (processes) read_processes(nvml, ref, s);
  if (!extras) return s;
  s.memory_temperature = opt(ask(F::kMemoryTemperature, [&] { return nvml.memory_temperature(d); }));
  s.energy_mj = opt(ask(F::kEnergy, [&] { return nvml.total_energy_mj(d); }));
  s.pcie_replays = opt(ask(F::kPcieReplays, [&] { return nvml.uint_property(d, &nvml::Functions::pcie_replay); }));
  s.encoder_percent = opt(ask(F::kEncoder, [&] { return nvml.encoder_percent(d); }));
  s.decoder_percent = opt(ask(F::kDecoder, [&] { return nvml.decoder_percent(d); }));
  s.jpg_percent = opt(ask(F::kJpg, [&] { return nvml.jpg_percent(d); }));
  s.ofa_percent = opt(ask(F::kOfa, [&] { return nvml.ofa_percent(d); }));
  if (auto b = ask(F::kBar1, [&] { return nvml.bar1_memory(d); })) s.bar1_used = b->used;
  if (auto c = ask(F::kCcProtected, [&] { return nvml.cc_protected_memory(d); })) s.cc_protected_used = c->used;
  s.ecc_corrected =
      opt(ask(F::kEccCorrected, [&] { return nvml.ecc_errors(d, abi::kEccCorrected, abi::kEccVolatile); }));
  s.ecc_uncorrected =
      opt(ask(F::kEccUncorrected, [&] { return nvml.ecc_errors(d, abi::kEccUncorrected, abi::kEccVolatile); }));
  return s;
}

Sampler::Sampler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Sampler::Sampler(const SamplerOptions& options) {
  std::shared_ptr<const nvml::Nvml> nvml = nvml::Nvml::open();
  *this = make_sampler(nvml, select_gpus(*nvml, options.ids), options);
}
Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

Sampler make_sampler(std::shared_ptr<const nvml::Nvml> nvml, std::vector<GpuRef> gpus, const SamplerOptions& options) {
  auto impl = std::make_unique<Sampler::Impl>();
  impl->nvml = std::move(nvml);
  impl->gpus = std::move(gpus);
  impl->options = options;
  impl->identity.resize(impl->gpus.size());
  impl->identity_read.assign(impl->gpus.size(), false);
  impl->unsupported.resize(impl->gpus.size());
  impl->power_limit.resize(impl->gpus.size());
  impl->power_viol.resize(impl->gpus.size());
  impl->thermal_viol.resize(impl->gpus.size());
  impl->proc_util_seen_us.assign(impl->gpus.size(), 0);
  if (options.xid) {
    std::vector<nvml::abi::Device> devices;
    for (const auto& g : impl->gpus) devices.push_back(g.device);
    impl->xid = std::make_unique<nvml::XidEvents>(impl->nvml, devices);
  }
  if (options.violations)  // the base readings, so the first sample already has a rate
    for (size_t i = 0; i < impl->gpus.size(); ++i) {
      GpuSample ignored;
      if (impl->gpus[i].device) read_violations(*impl->nvml, impl->gpus[i].device, *impl, i, ignored);
    }
  if (options.pcie) {
    std::vector<nvml::abi::Device> devices;
    for (const auto& g : impl->gpus) devices.push_back(g.device);
    impl->pcie = std::make_unique<nvml::PcieSampler>(impl->nvml, devices);
    // The first sample has a reading: ~20 ms a counter in the driver, two per GPU (bounded by a GPU that
    // does not answer).
    impl->pcie->wait_first_round(std::chrono::milliseconds(100 + 50 * devices.size()));
  }
  return Sampler(std::move(impl));
}

std::vector<unsigned> Sampler::indices() const {
  std::vector<unsigned> out;
  for (const auto& g : impl_->gpus) out.push_back(g.index);
  return out;
}

SampleSet Sampler::sample() {
  Impl& m = *impl_;
  const nvml::Nvml& nvml = *m.nvml;
  SampleSet set;
  set.taken_at = std::chrono::system_clock::now();
  const auto start = std::chrono::steady_clock::now();
  const bool read_limit = start - m.limit_read_at >= std::chrono::seconds(1);
  if (read_limit) m.limit_read_at = start;
  if (m.xid) m.xid->poll();
  for (size_t i = 0; i < m.gpus.size(); ++i) {
    const GpuRef& ref = m.gpus[i];
    GpuSample s = sample_gpu(nvml, ref, m.options.processes, m.options.extras, &m.unsupported[i]);
    GpuSample& id = m.identity[i];
    if (s.error.empty() && !m.identity_read[i]) {  // identity and maxima cannot change: read them once
      id.name = opt(nvml.name(ref.device));
      id.uuid = opt(nvml.uuid(ref.device));
      id.bus_id = opt(nvml.pci_bus_id(ref.device));
      id.minor = opt(nvml.minor_number(ref.device));
      id.max_clock_graphics_mhz = opt(nvml.max_clock_mhz(ref.device, nvml::abi::kClockGraphics));
      id.max_clock_sm_mhz = opt(nvml.max_clock_mhz(ref.device, nvml::abi::kClockSm));
      id.max_clock_memory_mhz = opt(nvml.max_clock_mhz(ref.device, nvml::abi::kClockMem));
      m.identity_read[i] = id.name.has_value();
    }
    s.name = id.name;
    s.uuid = id.uuid;
    s.bus_id = id.bus_id;
    s.minor = id.minor;
    s.max_clock_graphics_mhz = id.max_clock_graphics_mhz;
    s.max_clock_sm_mhz = id.max_clock_sm_mhz;
    s.max_clock_memory_mhz = id.max_clock_memory_mhz;
    if (s.error.empty() && read_limit) m.power_limit[i] = opt(nvml.power_limit_mw(ref.device));
    if (s.error.empty()) s.power_limit_mw = m.power_limit[i];
    if (s.error.empty() && m.options.violations) read_violations(nvml, ref.device, m, i, s);
    if (s.error.empty() && m.options.process_utilization) read_process_utilization(nvml, ref.device, m.proc_util_seen_us[i], s);
    if (m.xid) s.last_xid = m.xid->last_xid(i);
    if (s.error.empty() && m.options.remapped_rows) {
      if (auto rows = nvml.remapped_rows(ref.device)) {
        s.remapped_rows_correctable = rows->correctable;
        s.remapped_rows_uncorrectable = rows->uncorrectable;
        s.row_remap_failure = rows->failure;
      }
    }
    if (m.pcie) {
      nvml::PcieRate r = m.pcie->latest(i);
      s.pcie_rx_kbps = r.rx_kbps;
      s.pcie_tx_kbps = r.tx_kbps;
    }
    set.gpus.push_back(std::move(s));
  }
  set.took = std::chrono::steady_clock::now() - start;
  return set;
}

}  // namespace gpumem::monitor
