// Building a Sampler over an NVML the caller already opened (the CLI selects GPUs itself; the tests
// point it at the NVML test double). See include/gpumem/monitor.hpp for the contract.
#pragma once
#include <gpumem/monitor.hpp>

#include <bitset>
#include <memory>
#include <vector>

#include "monitor/common.hpp"
#include "nvml/pcie_sampler.hpp"
#include "nvml/xid_events.hpp"

namespace gpumem::monitor {

// The per-sample fields a GPU answered "not supported" for; never asked again. NVML takes ~130 us to refuse
// the fan speed of an H200 (BENCHMARKS.md, Monitor), more than all its live values together.
enum class SampleField : unsigned {
  kUtilization, kTemperature, kMemoryTemperature, kPower, kClockGraphics, kClockSm, kClockMemory, kFan,
  kEnergy, kPcieReplays, kPstate, kEncoder, kDecoder, kJpg, kOfa, kBar1, kCcProtected, kEccCorrected, kEccUncorrected, kCount
};
using Unsupported = std::bitset<static_cast<size_t>(SampleField::kCount)>;

struct Sampler::Impl {
  std::shared_ptr<const nvml::Nvml> nvml;
  std::vector<GpuRef> gpus;
  SamplerOptions options;
  std::unique_ptr<nvml::PcieSampler> pcie;
  std::vector<GpuSample> identity;  // per GPU: name/uuid/bus/max clocks read once
  std::vector<Unsupported> unsupported;  // per GPU
  std::vector<bool> identity_read;
  std::chrono::steady_clock::time_point limit_read_at{};
  std::vector<std::optional<unsigned>> power_limit;
  std::unique_ptr<nvml::XidEvents> xid;
  // Previous violation counters (power, thermal) and the newest per-process utilization timestamp, per GPU.
  std::vector<std::optional<nvml::ViolationCounter>> power_viol, thermal_viol;
  std::vector<unsigned long long> proc_util_seen_us;
};

Sampler make_sampler(std::shared_ptr<const nvml::Nvml> nvml, std::vector<GpuRef> gpus, const SamplerOptions& options);

// Reads one GPU now: the building block of Sampler::sample(). With `unsupported`, skips the fields it names
// and adds the ones the GPU refuses now.
GpuSample sample_gpu(const nvml::Nvml& nvml, const GpuRef& ref, bool processes, bool extras = true,
                     Unsupported* unsupported = nullptr);

}  // namespace gpumem::monitor
