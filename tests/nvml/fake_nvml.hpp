// Shared state of the NVML test double (fake_nvml.cpp reads the scenario; fake_nvml_health.cpp adds
// the health and event entry points): the scenario and the lookups every entry point answers with.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "nvml/abi.hpp"

namespace abi = gpumem::nvml::abi;

namespace fake_nvml {

using Kv = std::map<std::string, std::string>;

struct Gpu {
  Kv kv;
};
struct Proc {
  unsigned gpu = 0, pid = 0;
  unsigned long long used = 0;
  bool used_na = false, graphics = false;
  std::string name;
  Kv kv;  // every key of the line (sm=NN: the process's SM utilization sample)
};
struct Scenario {
  std::string driver = "550.54.15";
  std::string cuda = "12040";
  int init_error = 0;
  bool insufficient_once = false;
  std::vector<Gpu> gpus;
  std::vector<Proc> procs;
};

extern Scenario g_scenario;

// Read-only lookup: the scenario is shared by every thread that calls into the double.
std::string get(const Kv& kv, const std::string& key);
// Device handles are 1-based indices disguised as pointers; null for a handle the scenario lacks.
Gpu* gpu_of(abi::Device d);
// Looks up `key` on the device: absent → `fallback`; "na" → NOT_SUPPORTED; "noperm", "error"; lost GPU → GPU_IS_LOST.
abi::Return value(abi::Device d, const std::string& key, unsigned long long* out, const char* fallback);
abi::Return string_value(abi::Device d, const std::string& key, char* buf, unsigned len, const std::string& fallback);

template <class T>
abi::Return value_as(abi::Device d, const std::string& key, T* out, const char* fallback) {
  if (!out) return abi::kErrorInvalidArgument;
  unsigned long long v = 0;
  abi::Return rc = value(d, key, &v, fallback);
  if (rc == abi::kSuccess) *out = static_cast<T>(v);
  return rc;
}

}  // namespace fake_nvml

#define EXPORT extern "C" __attribute__((visibility("default")))
