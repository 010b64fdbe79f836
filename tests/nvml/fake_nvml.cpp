// Test double of the NVML C ABI: scripted GPUs, processes and failures, loaded by gpumem through
// GPUMEM_NVML_LIBRARY exactly like libnvidia-ml.so.1. The scenario file named by
// GPUMEM_FAKE_NVML_SCENARIO is read at nvmlInit; its format (one item per line, key=value words):
//   driver 550.54.15 | cuda 12040 | init_error 9 | insufficient_size_once 1
//   gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-... bus=00000000:18:00.0 total_mib=81559 used_mib=80 ...
//       (any value "na" makes that call return NOT_SUPPORTED; lost=1: calls return GPU_IS_LOST;
//        lost=handle: nvmlDeviceGetHandleByIndex fails; memory_v2=mismatch: _v2 rejects the struct;
//        hang_file=PATH: while PATH exists, every call on the GPU waits: a GPU that stops answering)
//   proc gpu=0 pid=1234 used_mib=400 type=compute|graphics name=python3
// Built three times: the current driver ABI, an old driver (-DFAKE_NVML_OLD_DRIVER: no _v2/_v3 entry
// points) and the driver whose _v3 process records carry usedGpuCcProtectedMemory (-DFAKE_NVML_CC_V3).
// Health and event entry points (violations, retired pages, XID events...) are in fake_nvml_health.cpp.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fake_nvml.hpp"

namespace fake_nvml {

Scenario g_scenario;

// Read-only lookup: the scenario is shared by every thread that calls into the double.
std::string get(const Kv& kv, const std::string& key) {
  auto it = kv.find(key);
  return it == kv.end() ? std::string() : it->second;
}
std::atomic<bool> g_insufficient_pending{false};
std::mutex g_pcie_mutex;
std::condition_variable g_pcie_cv;
bool g_pcie_blocked = false;
std::atomic<int> g_pcie_inflight{0};

Kv parse_words(std::istringstream& in) {
  Kv kv;
  std::string rest, word;
  std::getline(in, rest);
  size_t i = 0;
  while (i < rest.size()) {
    while (i < rest.size() && rest[i] == ' ') ++i;
    if (i >= rest.size()) break;
    size_t eq = rest.find('=', i);
    if (eq == std::string::npos) break;
    std::string key = rest.substr(i, eq - i);
    std::string value;
    i = eq + 1;
    if (i < rest.size() && rest[i] == '"') {
      size_t end = rest.find('"', i + 1);
      value = rest.substr(i + 1, end - i - 1);
      i = end == std::string::npos ? rest.size() : end + 1;
    } else {
      size_t end = rest.find(' ', i);
      value = rest.substr(i, end == std::string::npos ? std::string::npos : end - i);
      i = end == std::string::npos ? rest.size() : end;
    }
    kv[key] = value;
  }
  return kv;
}

void load_scenario() {
  g_scenario = Scenario{};
  const char* path = std::getenv("GPUMEM_FAKE_NVML_SCENARIO");
  if (!path) return;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind.empty() || kind[0] == '#') continue;
    if (kind == "driver") in >> g_scenario.driver;
    else if (kind == "cuda") in >> g_scenario.cuda;
    else if (kind == "init_error") in >> g_scenario.init_error;
    else if (kind == "insufficient_size_once") g_scenario.insufficient_once = true;
    else if (kind == "gpu") g_scenario.gpus.push_back(Gpu{parse_words(in)});
    else if (kind == "proc") {
      Kv kv = parse_words(in);
      Proc p;
      p.gpu = std::stoul(kv["gpu"]);
      p.pid = std::stoul(kv["pid"]);
      p.used_na = kv["used_mib"] == "na";
      if (!p.used_na && !kv["used_mib"].empty()) p.used = std::stoull(kv["used_mib"]) << 20;
      p.graphics = kv["type"] == "graphics";
      p.name = kv["name"];
      p.kv = kv;
      g_scenario.procs.push_back(p);
    }
  }
  g_insufficient_pending = g_scenario.insufficient_once;
}

// Device handles are 1-based indices disguised as pointers.
Gpu* gpu_of(abi::Device d) {
  auto i = reinterpret_cast<uintptr_t>(d);
  if (i == 0 || i > g_scenario.gpus.size()) return nullptr;
  return &g_scenario.gpus[i - 1];
}

// Looks up `key` on the device: absent → `fallback`; "na" → NOT_SUPPORTED; lost GPU → GPU_IS_LOST.
// A GPU that stops answering: hold the caller while the scenario's hang file exists.
void maybe_hang(const Gpu& g) {
  std::string path = get(g.kv, "hang_file");
  if (path.empty()) return;
  while (std::ifstream(path).good()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

abi::Return value(abi::Device d, const std::string& key, unsigned long long* out, const char* fallback) {
  Gpu* g = gpu_of(d);
  if (!g) return abi::kErrorInvalidArgument;
  maybe_hang(*g);
  if (get(g->kv, "lost") == "1") return abi::kErrorGpuIsLost;
  auto it = g->kv.find(key);
  std::string v = it == g->kv.end() ? fallback : it->second;
  if (v == "na") return abi::kErrorNotSupported;
  if (v == "noperm") return abi::kErrorNoPermission;
  if (v == "error") return abi::kErrorUnknown;
  *out = std::stoull(v);
  return abi::kSuccess;
}

abi::Return string_value(abi::Device d, const std::string& key, char* buf, unsigned len, const std::string& fallback) {
  Gpu* g = gpu_of(d);
  if (!g || !buf) return abi::kErrorInvalidArgument;
  if (get(g->kv, "lost") == "1") return abi::kErrorGpuIsLost;
  auto it = g->kv.find(key);
  std::string v = it == g->kv.end() ? fallback : it->second;
  if (v == "na") return abi::kErrorNotSupported;
  if (v.size() + 1 > len) return abi::kErrorInsufficientSize;
  std::memcpy(buf, v.c_str(), v.size() + 1);
  return abi::kSuccess;
}

std::string default_uuid(abi::Device d) {
  return "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(reinterpret_cast<uintptr_t>(d) - 1);
}

template <class Record>
abi::Return list_processes(abi::Device d, unsigned* count, void* out, bool graphics) {
  Gpu* g = gpu_of(d);
  if (!g || !count) return abi::kErrorInvalidArgument;
  if (get(g->kv, "lost") == "1") return abi::kErrorGpuIsLost;
  if (get(g->kv, "processes") == "na") return abi::kErrorNotSupported;
  unsigned index = static_cast<unsigned>(reinterpret_cast<uintptr_t>(d) - 1);
  std::vector<const Proc*> mine;
  for (const Proc& p : g_scenario.procs)
    if (p.gpu == index && p.graphics == graphics) mine.push_back(&p);
  if (*count < mine.size() || !out) {
    *count = static_cast<unsigned>(mine.size());
    return mine.empty() ? abi::kSuccess : abi::kErrorInsufficientSize;
  }
  // A process that appears between the sizing call and the fetch: report the list as too small once.
  if (!graphics && g_insufficient_pending.exchange(false)) {
    *count = static_cast<unsigned>(mine.size()) + 1;
    return abi::kErrorInsufficientSize;
  }
  auto* records = static_cast<Record*>(out);
  for (size_t i = 0; i < mine.size(); ++i) {
    Record r{};
    r.pid = mine[i]->pid;
    r.usedGpuMemory = mine[i]->used_na ? abi::kValueNotAvailable : mine[i]->used;
    if constexpr (sizeof(Record) >= sizeof(abi::ProcessInfo_v2)) {
      r.gpuInstanceId = 0xFFFFFFFFu;
      r.computeInstanceId = 0xFFFFFFFFu;
    }
    records[i] = r;
  }
  *count = static_cast<unsigned>(mine.size());
  return abi::kSuccess;
}

}  // namespace fake_nvml

using namespace fake_nvml;

// Test controls (not NVML): hold PCIe throughput calls until released, to prove nothing waits on them.
EXPORT void gpumem_fake_nvml_block_pcie(int blocked) {
  std::lock_guard<std::mutex> lock(g_pcie_mutex);
  g_pcie_blocked = blocked != 0;
  g_pcie_cv.notify_all();
}
EXPORT int gpumem_fake_nvml_pcie_inflight() { return g_pcie_inflight.load(); }
// How often nvmlDeviceGetFanSpeed was called: to prove a field the GPU refuses is not asked again.
static std::atomic<int> g_fan_calls{0};
EXPORT int gpumem_fake_nvml_fan_calls() { return g_fan_calls.load(); }

EXPORT abi::Return nvmlInit() {
  load_scenario();
  return g_scenario.init_error;
}
#ifndef FAKE_NVML_OLD_DRIVER
EXPORT abi::Return nvmlInit_v2() { return nvmlInit(); }
#endif
EXPORT abi::Return nvmlShutdown() { return abi::kSuccess; }
EXPORT const char* nvmlErrorString(abi::Return rc) {
  switch (rc) {
    case abi::kSuccess: return "Success";
    case abi::kErrorNotSupported: return "Not Supported";
    case abi::kErrorNoPermission: return "Insufficient Permissions";
    case abi::kErrorDriverNotLoaded: return "Driver Not Loaded";
    case abi::kErrorGpuIsLost: return "GPU is lost";
    case abi::kErrorInsufficientSize: return "Insufficient Size";
    default: return "Unknown Error";
  }
}
EXPORT abi::Return nvmlSystemGetDriverVersion(char* buf, unsigned len) {
  if (g_scenario.driver.size() + 1 > len) return abi::kErrorInsufficientSize;
  std::memcpy(buf, g_scenario.driver.c_str(), g_scenario.driver.size() + 1);
  return abi::kSuccess;
}
EXPORT abi::Return nvmlSystemGetCudaDriverVersion(int* v) {
  if (g_scenario.cuda == "na") return abi::kErrorNotSupported;
  *v = std::stoi(g_scenario.cuda);
  return abi::kSuccess;
}
#ifndef FAKE_NVML_OLD_DRIVER
EXPORT abi::Return nvmlSystemGetCudaDriverVersion_v2(int* v) { return nvmlSystemGetCudaDriverVersion(v); }
#endif
EXPORT abi::Return nvmlSystemGetProcessName(unsigned pid, char* buf, unsigned len) {
  for (const Proc& p : g_scenario.procs) {
    if (p.pid != pid || p.name.empty()) continue;
    std::snprintf(buf, len, "%s", p.name.c_str());
    return abi::kSuccess;
  }
  return abi::kErrorNotFound;
}
EXPORT abi::Return nvmlDeviceGetCount(unsigned* n) {
  *n = static_cast<unsigned>(g_scenario.gpus.size());
  return abi::kSuccess;
}
EXPORT abi::Return nvmlDeviceGetHandleByIndex(unsigned i, abi::Device* d) {
  if (i >= g_scenario.gpus.size()) return abi::kErrorInvalidArgument;
  if (get(g_scenario.gpus[i].kv, "lost") == "handle") return abi::kErrorGpuIsLost;
  *d = reinterpret_cast<abi::Device>(static_cast<uintptr_t>(i + 1));
  return abi::kSuccess;
}
#ifndef FAKE_NVML_OLD_DRIVER
EXPORT abi::Return nvmlDeviceGetCount_v2(unsigned* n) { return nvmlDeviceGetCount(n); }
EXPORT abi::Return nvmlDeviceGetHandleByIndex_v2(unsigned i, abi::Device* d) { return nvmlDeviceGetHandleByIndex(i, d); }
#endif
EXPORT abi::Return nvmlDeviceGetName(abi::Device d, char* buf, unsigned len) {
  return string_value(d, "name", buf, len, "NVIDIA Fake GPU");
}
EXPORT abi::Return nvmlDeviceGetUUID(abi::Device d, char* buf, unsigned len) {
  return string_value(d, "uuid", buf, len, default_uuid(d));
}
static abi::Return pci_common(abi::Device d, abi::PciInfo* info, bool v3) {
  char bus[40] = {};
  std::snprintf(bus, sizeof bus, "00000000:%02X:00.0", static_cast<unsigned>(reinterpret_cast<uintptr_t>(d)) * 16);
  char text[40] = {};
  abi::Return rc = string_value(d, "bus", text, sizeof text, bus);
  if (rc != abi::kSuccess) return rc;
  unsigned dom = 0, b = 0, dev = 0;
  std::sscanf(text, "%x:%x:%x", &dom, &b, &dev);
  std::memset(info, 0, v3 ? sizeof(abi::PciInfo) : 16 + 9 * sizeof(unsigned));
  std::snprintf(info->busIdLegacy, sizeof info->busIdLegacy, "%04X:%02X:%02X.0", dom & 0xFFFF, b, dev);
  info->domain = dom;
  info->bus = b;
  info->device = dev;
  if (v3) std::snprintf(info->busId, sizeof info->busId, "%.*s", int(sizeof info->busId - 1), text);
  return abi::kSuccess;
}
EXPORT abi::Return nvmlDeviceGetPciInfo(abi::Device d, abi::PciInfo* info) { return pci_common(d, info, false); }
#ifndef FAKE_NVML_OLD_DRIVER
EXPORT abi::Return nvmlDeviceGetPciInfo_v3(abi::Device d, abi::PciInfo* info) { return pci_common(d, info, true); }
#endif
EXPORT abi::Return nvmlDeviceGetMinorNumber(abi::Device d, unsigned* m) {
  return value_as(d, "minor", m, std::to_string(reinterpret_cast<uintptr_t>(d) - 1).c_str());
}
static abi::Return memory_common(abi::Device d, unsigned long long* total, unsigned long long* reserved,
                                 unsigned long long* used, unsigned long long* free, bool v2) {
  abi::Return rc = value(d, "total_mib", total, "81559");
  if (rc != abi::kSuccess) return rc;
  unsigned long long res = 0, u = 0;
  if ((rc = value(d, "reserved_mib", &res, "0")) != abi::kSuccess) return rc;
  if ((rc = value(d, "used_mib", &u, "0")) != abi::kSuccess) return rc;
  *total <<= 20;
  res <<= 20;
  u <<= 20;
  *reserved = res;
  *used = v2 ? u : u + res;  // v1 counts the reserved memory as used
  *free = *total - res - u;
  return abi::kSuccess;
}
EXPORT abi::Return nvmlDeviceGetMemoryInfo(abi::Device d, abi::Memory_v1* m) {
  unsigned long long reserved = 0;
  return memory_common(d, &m->total, &reserved, &m->used, &m->free, false);
}
#ifndef FAKE_NVML_OLD_DRIVER
EXPORT abi::Return nvmlDeviceGetMemoryInfo_v2(abi::Device d, abi::Memory_v2* m) {
  Gpu* g = gpu_of(d);
  if (!g) return abi::kErrorInvalidArgument;
  if (m->version != abi::kMemory_v2_version || get(g->kv, "memory_v2") == "mismatch") return abi::kErrorArgumentVersionMismatch;
  return memory_common(d, &m->total, &m->reserved, &m->used, &m->free, true);
}
#endif
EXPORT abi::Return nvmlDeviceGetPerformanceState(abi::Device d, unsigned* p) { return value_as(d, "pstate", p, "0"); }
EXPORT abi::Return nvmlDeviceGetTemperature(abi::Device d, unsigned sensor, unsigned* t) {
  if (sensor != abi::kTemperatureGpu) return abi::kErrorInvalidArgument;
  return value_as(d, "temp", t, "34");
}
EXPORT abi::Return nvmlDeviceGetFieldValues(abi::Device d, int n, abi::FieldValue* values) {
  if (!gpu_of(d)) return abi::kErrorInvalidArgument;
  for (int i = 0; i < n; ++i) {
    if (values[i].fieldId != abi::kFieldMemoryTemp) {
      values[i].nvmlReturn = abi::kErrorNotSupported;
      continue;
    }
    values[i].valueType = abi::kValueTypeUnsignedInt;
    values[i].nvmlReturn = value_as(d, "mtemp", &values[i].value.uiVal, "45");
  }
  return abi::kSuccess;
}
EXPORT abi::Return nvmlDeviceGetUtilizationRates(abi::Device d, abi::Utilization* u) {
  abi::Return rc = value_as(d, "util_gpu", &u->gpu, "0");
  return rc == abi::kSuccess ? value_as(d, "util_mem", &u->memory, "0") : rc;
}
EXPORT abi::Return nvmlDeviceGetPowerUsage(abi::Device d, unsigned* p) { return value_as(d, "power_mw", p, "75430"); }
EXPORT abi::Return nvmlDeviceGetTotalEnergyConsumption(abi::Device d, unsigned long long* e) {
  return value_as(d, "energy_mj", e, "123456789");
}
EXPORT abi::Return nvmlDeviceGetPowerManagementLimit(abi::Device d, unsigned* p) { return value_as(d, "limit_mw", p, "700000"); }
EXPORT abi::Return nvmlDeviceGetClockInfo(abi::Device d, unsigned type, unsigned* c) {
  static const char* keys[] = {"clk_gr", "clk_sm", "clk_mem"};
  static const char* defaults[] = {"1980", "1980", "2619"};
  if (type > 2) return abi::kErrorInvalidArgument;
  return value_as(d, keys[type], c, defaults[type]);
}
EXPORT abi::Return nvmlDeviceGetMaxClockInfo(abi::Device d, unsigned type, unsigned* c) {
  static const char* keys[] = {"max_gr", "max_sm", "max_mem"};
  static const char* defaults[] = {"1980", "1980", "2619"};
  if (type > 2) return abi::kErrorInvalidArgument;
  return value_as(d, keys[type], c, defaults[type]);
}
EXPORT abi::Return nvmlDeviceGetFanSpeed(abi::Device d, unsigned* f) {
  ++g_fan_calls;
  return value_as(d, "fan", f, "na");
}
EXPORT abi::Return nvmlDeviceGetPersistenceMode(abi::Device d, unsigned* m) { return value_as(d, "persistence", m, "1"); }
EXPORT abi::Return nvmlDeviceGetComputeMode(abi::Device d, unsigned* m) { return value_as(d, "compute_mode", m, "0"); }
EXPORT abi::Return nvmlDeviceGetEccMode(abi::Device d, unsigned* cur, unsigned* pend) {
  abi::Return rc = value_as(d, "ecc", cur, "1");
  return rc == abi::kSuccess ? value_as(d, "ecc_pending", pend, std::to_string(*cur).c_str()) : rc;
}
EXPORT abi::Return nvmlDeviceGetTotalEccErrors(abi::Device d, unsigned type, unsigned counter, unsigned long long* n) {
  std::string key = std::string(type == abi::kEccUncorrected ? "ecc_unc" : "ecc_corr") +
                    (counter == abi::kEccAggregate ? "_agg" : "");
  return value_as(d, key, n, "0");
}
EXPORT abi::Return nvmlDeviceGetMigMode(abi::Device d, unsigned* cur, unsigned* pend) {
  abi::Return rc = value_as(d, "mig", cur, "0");
  return rc == abi::kSuccess ? value_as(d, "mig", pend, "0") : rc;
}
EXPORT abi::Return nvmlDeviceGetCudaComputeCapability(abi::Device d, int* major, int* minor) {
  abi::Return rc = value_as(d, "cc_major", major, "9");
  return rc == abi::kSuccess ? value_as(d, "cc_minor", minor, "0") : rc;
}
EXPORT abi::Return nvmlDeviceGetPcieThroughput(abi::Device d, unsigned counter, unsigned* kbps) {
  ++g_pcie_inflight;
  {
    std::unique_lock<std::mutex> lock(g_pcie_mutex);
    g_pcie_cv.wait(lock, [] { return !g_pcie_blocked; });
  }
  --g_pcie_inflight;
  return value_as(d, counter == abi::kPcieTxBytes ? "pcie_tx" : "pcie_rx", kbps, "1024");
}
EXPORT abi::Return nvmlDeviceGetComputeRunningProcesses(abi::Device d, unsigned* n, void* out) {
  return list_processes<abi::ProcessInfo_v1>(d, n, out, false);
}
EXPORT abi::Return nvmlDeviceGetGraphicsRunningProcesses(abi::Device d, unsigned* n, void* out) {
  return list_processes<abi::ProcessInfo_v1>(d, n, out, true);
}
#ifndef FAKE_NVML_OLD_DRIVER
EXPORT abi::Return nvmlDeviceGetComputeRunningProcesses_v2(abi::Device d, unsigned* n, void* out) {
  return list_processes<abi::ProcessInfo_v2>(d, n, out, false);
}
EXPORT abi::Return nvmlDeviceGetGraphicsRunningProcesses_v2(abi::Device d, unsigned* n, void* out) {
  return list_processes<abi::ProcessInfo_v2>(d, n, out, true);
}
#ifdef FAKE_NVML_CC_V3
using V3Record = abi::ProcessInfo_v3cc;
#else
using V3Record = abi::ProcessInfo_v2;
// Present on drivers whose _v3 went back to the 24-byte record.
EXPORT abi::Return nvmlDeviceGetRunningProcessDetailList(abi::Device, void*) { return abi::kErrorNotSupported; }
#endif
EXPORT abi::Return nvmlDeviceGetConfComputeMemSizeInfo(abi::Device, void*) { return abi::kErrorNotSupported; }
EXPORT abi::Return nvmlDeviceGetComputeRunningProcesses_v3(abi::Device d, unsigned* n, void* out) {
  return list_processes<V3Record>(d, n, out, false);
}
EXPORT abi::Return nvmlDeviceGetGraphicsRunningProcesses_v3(abi::Device d, unsigned* n, void* out) {
  return list_processes<V3Record>(d, n, out, true);
}
#endif

// nvidia-smi's remaining query fields and dmon columns (keys: vbios, serial, display_mode, display_active,
// pcie_gen, pcie_gen_max, pcie_width, pcie_width_max, pcie_replay, enforced_mw, default_limit_mw,
// min_limit_mw, max_limit_mw, event_reasons, enc, dec, bar1_used_mib, bar1_total_mib).
EXPORT abi::Return nvmlDeviceGetVbiosVersion(abi::Device d, char* buf, unsigned len) {
  return string_value(d, "vbios", buf, len, "96.00.74.00.01");
}
EXPORT abi::Return nvmlDeviceGetSerial(abi::Device d, char* buf, unsigned len) {
  return string_value(d, "serial", buf, len, "165422000000" + std::to_string(reinterpret_cast<uintptr_t>(d)));
}
EXPORT abi::Return nvmlDeviceGetDisplayMode(abi::Device d, unsigned* v) { return value_as(d, "display_mode", v, "0"); }
EXPORT abi::Return nvmlDeviceGetDisplayActive(abi::Device d, unsigned* v) { return value_as(d, "display_active", v, "0"); }
EXPORT abi::Return nvmlDeviceGetCurrPcieLinkGeneration(abi::Device d, unsigned* v) { return value_as(d, "pcie_gen", v, "5"); }
EXPORT abi::Return nvmlDeviceGetMaxPcieLinkGeneration(abi::Device d, unsigned* v) { return value_as(d, "pcie_gen_max", v, "5"); }
EXPORT abi::Return nvmlDeviceGetCurrPcieLinkWidth(abi::Device d, unsigned* v) { return value_as(d, "pcie_width", v, "16"); }
EXPORT abi::Return nvmlDeviceGetMaxPcieLinkWidth(abi::Device d, unsigned* v) { return value_as(d, "pcie_width_max", v, "16"); }
EXPORT abi::Return nvmlDeviceGetPcieReplayCounter(abi::Device d, unsigned* v) { return value_as(d, "pcie_replay", v, "0"); }
EXPORT abi::Return nvmlDeviceGetEnforcedPowerLimit(abi::Device d, unsigned* v) { return value_as(d, "enforced_mw", v, "700000"); }
EXPORT abi::Return nvmlDeviceGetPowerManagementDefaultLimit(abi::Device d, unsigned* v) {
  return value_as(d, "default_limit_mw", v, "700000");
}
EXPORT abi::Return nvmlDeviceGetPowerManagementLimitConstraints(abi::Device d, unsigned* lo, unsigned* hi) {
  abi::Return rc = value_as(d, "min_limit_mw", lo, "200000");
  return rc == abi::kSuccess ? value_as(d, "max_limit_mw", hi, "700000") : rc;
}
#ifndef FAKE_NVML_OLD_DRIVER
EXPORT abi::Return nvmlDeviceGetCurrentClocksEventReasons(abi::Device d, unsigned long long* v) {
  return value_as(d, "event_reasons", v, "1");
}
#endif
EXPORT abi::Return nvmlDeviceGetCurrentClocksThrottleReasons(abi::Device d, unsigned long long* v) {
  return value_as(d, "event_reasons", v, "1");
}
EXPORT abi::Return nvmlDeviceGetEncoderUtilization(abi::Device d, unsigned* u, unsigned* period) {
  *period = 167000;
  return value_as(d, "enc", u, "0");
}
EXPORT abi::Return nvmlDeviceGetDecoderUtilization(abi::Device d, unsigned* u, unsigned* period) {
  *period = 167000;
  return value_as(d, "dec", u, "0");
}
EXPORT abi::Return nvmlDeviceGetConfComputeProtectedMemoryUsage(abi::Device d, abi::Memory_v1* m) {
  unsigned long long used = 0;
  abi::Return rc = value(d, "ccpm_used_mib", &used, "0");
  if (rc != abi::kSuccess) return rc;
  m->total = m->used = used << 20;
  m->free = 0;
  return abi::kSuccess;
}
EXPORT abi::Return nvmlDeviceGetBAR1MemoryInfo(abi::Device d, abi::BAR1Memory* m) {
  unsigned long long used = 0, total = 0;
  abi::Return rc = value(d, "bar1_used_mib", &used, "1");
  if (rc == abi::kSuccess) rc = value(d, "bar1_total_mib", &total, "131072");
  if (rc != abi::kSuccess) return rc;
  m->bar1Total = total << 20;
  m->bar1Used = used << 20;
  m->bar1Free = m->bar1Total - m->bar1Used;
  return abi::kSuccess;
}
