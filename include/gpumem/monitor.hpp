// What the monitor renderers (query-style CSV/JSON, dmon, Prometheus, `gpumem top`, the one-shot summary)
// read: one sample of every selected GPU, taken once per tick. Contract: every field a GPU may not
// support is optional (absent = NVML could not answer; `error` on the GPU says why when the whole GPU
// failed), a sample never throws for a failing GPU, and Sampler::sample() makes each NVML call at most
// once. Identity (name, UUID, bus id) is read once; the power limit at most once a second; a field the GPU
// answered "not supported" is not asked again.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::monitor {

struct ProcessSample {
  unsigned gpu = 0;  // NVML index
  unsigned pid = 0;
  std::optional<unsigned long long> used_bytes;  // absent when the driver says "not available"
  bool compute = false, graphics = false;        // which NVML lists name it (both: "C+G")
  std::optional<unsigned> sm_percent;  // only with SamplerOptions::process_utilization; absent: not supported
};

struct GpuSample {
  unsigned index = 0;
  std::string error;  // non-empty when the GPU cannot be reached at all ("GPU is lost")
  std::optional<std::string> name, uuid, bus_id;
  std::optional<unsigned> minor;  // N of /dev/nvidiaN
  std::optional<unsigned long long> memory_total, memory_used, memory_free;
  std::optional<unsigned long long> memory_reserved;  // driver/firmware memory (NVML memory v2 only)
  std::optional<unsigned> util_gpu, util_memory;      // percent over the driver's last sample period
  std::optional<unsigned> temperature, memory_temperature;  // Celsius
  std::optional<unsigned> power_mw, power_limit_mw;
  std::optional<unsigned> clock_graphics_mhz, clock_sm_mhz, clock_memory_mhz;
  std::optional<unsigned> max_clock_graphics_mhz, max_clock_sm_mhz, max_clock_memory_mhz;
  std::optional<unsigned> fan_percent, pstate;
  std::optional<unsigned long long> energy_mj;  // since the driver loaded (Volta and newer)
  std::optional<unsigned> pcie_replays;         // PCIe retries since the driver loaded
  std::optional<unsigned> pcie_rx_kbps, pcie_tx_kbps;  // only when the sampler measures PCIe
  std::optional<unsigned> encoder_percent, decoder_percent;
  std::optional<unsigned> jpg_percent, ofa_percent;  // JPEG decoder and optical flow engines
  // Only with SamplerOptions::violations: share of time since the previous sample that clocks were held
  // down by the power cap, and whether a thermal limit held them down at all (nvidia-smi dmon -s v).
  std::optional<unsigned> power_violation_percent;
  std::optional<bool> thermal_violation;
  std::optional<unsigned long long> last_xid;  // only with SamplerOptions::xid: 0 until an XID arrives
  // Only with SamplerOptions::remapped_rows (Ampere and newer): rows remapped since manufacture.
  std::optional<unsigned> remapped_rows_correctable, remapped_rows_uncorrectable;
  std::optional<bool> row_remap_failure;
  std::optional<unsigned long long> bar1_used;
  std::optional<unsigned long long> cc_protected_used;  // confidential-computing memory (dmon ccpm)
  std::optional<unsigned long long> ecc_corrected, ecc_uncorrected;  // volatile counts
  std::optional<std::vector<ProcessSample>> processes;  // absent: the process list could not be read
  std::string processes_error;                          // why, when absent
};

struct SampleSet {
  std::chrono::system_clock::time_point taken_at;
  std::chrono::steady_clock::duration took{};  // how long the NVML calls of this sample lasted
  std::vector<GpuSample> gpus;
};

struct SamplerOptions {
  std::string ids;         // nvidia-smi's -i: indices, UUIDs or bus ids, comma separated; empty = all
  bool processes = true;   // read the compute and graphics process lists
  // memory temperature, energy, PCIe replays, encoder/decoder/JPEG/OFA utilization, BAR1, ECC counts: 10
  // NVML calls per GPU that the query-style views (gpumem.gpus()) do not show; absent when false
  bool extras = true;
  bool pcie = false;       // measure PCIe throughput on a background thread (its calls block ~20 ms)
  bool process_utilization = false;  // %SM per process (one more NVML call per GPU)
  bool violations = false;           // power/thermal violation rates (two calls per GPU, rates from the previous sample)
  bool xid = false;                  // register for XID events once and poll them at each sample
  bool remapped_rows = false;        // read the row remapper's counters
};

class Sampler {
 public:
  struct Impl;
  // Opens NVML and selects the GPUs. Throws gpumem::BackendUnavailableError without NVML, and
  // gpumem::Error when an id matches no GPU.
  explicit Sampler(const SamplerOptions& options);
  explicit Sampler(std::unique_ptr<Impl> impl);
  ~Sampler();
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) noexcept;

  SampleSet sample();
  std::vector<unsigned> indices() const;  // the selected GPUs, in order

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumem::monitor
