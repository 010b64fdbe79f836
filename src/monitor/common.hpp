// Shared pieces of the monitor commands: their error kinds (mapped to exit codes by the CLI), GPU
// selection by -i, and the small formatting helpers every output uses.
#pragma once
#include <gpumem/errors.hpp>

#include <string>
#include <vector>

#include "nvml/nvml.hpp"

namespace gpumem::monitor {

// Bad flag value or field name: exit code "usage".
class UsageError : public Error {
 public:
  using Error::Error;
};
// The GPU asked for does not exist (or there is none): exit code "no device".
class NoSuchGpuError : public Error {
 public:
  using Error::Error;
};

struct GpuRef {
  unsigned index = 0;
  nvml::Nvml::Device device = nullptr;
  nvml::abi::Return status = nvml::abi::kSuccess;  // why `device` is null (e.g. GPU is lost)
};

// GPUs named by `ids` (nvidia-smi's -i: comma-separated indices, UUIDs or PCI bus ids; empty = all),
// in the order given. Throws NoSuchGpuError for an id that matches nothing or when there is no GPU.
std::vector<GpuRef> select_gpus(const nvml::Nvml& nvml, const std::string& ids);
// True when two PCI bus ids name the same function, however each writes the domain ("00000000:18:00.0",
// "0000:18:00.0", "18:00.0"; hex digits in either case).
bool same_bus_id(const std::string& nvml_bus_id, const std::string& id);

// Whole MiB as nvidia-smi prints them: rounded up. On an H200 (driver 580) truncating printed 615/143155
// and rounding 615/143156 where nvidia-smi prints reserved 616 / free 143156; rounding up fits both.
inline unsigned long long to_mib(unsigned long long bytes) { return (bytes + (1ull << 20) - 1) >> 20; }

// Local time as nvidia-smi prints it: "2026/11/21 10:01:02.123".
std::string timestamp_now();

// "12.4" from NVML's 12040.
std::string cuda_version_text(int v);

std::vector<std::string> split(const std::string& s, char sep);
std::string trim(const std::string& s);

}  // namespace gpumem::monitor
