// NVML test double, part two: health counters and events. Scenario keys on a `gpu` line:
//   jpg, ofa (percent) | viol_power_pct, viol_thermal_pct: share of time the counters grow by
//   retired_sbe, retired_dbe, retired_pending | remap_corr, remap_unc, remap_pending, remap_failure
//   proc_util=na: no per-process utilization; `proc ... sm=NN` gives a process an SM sample
//   xid=N: one XID queued when the GPU is registered for events (xid=na: events not supported)
//   xid_file=PATH: at each wait, a number in PATH becomes an XID on this GPU (the file is removed)
// The old-driver build lacks the newer entry points (JPEG/OFA, row remapping, events), as such drivers do.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>

#include "fake_nvml.hpp"

using namespace fake_nvml;

namespace {

unsigned long long now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Counters start when the library is loaded; they grow by pct% of the elapsed time. The reference time
// advances at every reading, so two readings always span some time, as on a real GPU.
const unsigned long long g_loaded_us = now_us();
std::atomic<unsigned long long> g_last_reference_us{0};

unsigned long long next_reference_us() {
  unsigned long long prev = g_last_reference_us.load(), next;
  do next = std::max(now_us(), prev + 1);
  while (!g_last_reference_us.compare_exchange_weak(prev, next));
  return next;
}

struct EventSet {
  std::vector<abi::Device> devices;
  std::deque<abi::EventData> pending;
};
std::mutex g_events_mutex;
std::vector<std::unique_ptr<EventSet>> g_sets;

EventSet* set_of(abi::EventSet s) {
  for (auto& p : g_sets)
    if (reinterpret_cast<abi::EventSet>(p.get()) == s) return p.get();
  return nullptr;
}

abi::EventData xid_event(abi::Device d, unsigned long long xid) {
  abi::EventData e{};
  e.device = d;
  e.eventType = abi::kEventTypeXidCriticalError;
  e.eventData = xid;
  e.gpuInstanceId = e.computeInstanceId = 0xFFFFFFFFu;
  return e;
}

// XIDs written to a GPU's xid_file since the last wait (caller holds g_events_mutex).
void read_xid_files(EventSet& set) {
  for (abi::Device d : set.devices) {
    std::string path = get(gpu_of(d)->kv, "xid_file");
    if (path.empty()) continue;
    std::ifstream f(path);
    unsigned long long xid = 0;
    if (!(f >> xid)) continue;
    std::remove(path.c_str());
    set.pending.push_back(xid_event(d, xid));
  }
}

}  // namespace

// Test control (not NVML): an XID on GPU `index`, delivered to every set it is registered in.
EXPORT void gpumem_fake_nvml_inject_xid(unsigned index, unsigned long long xid) {
  std::lock_guard<std::mutex> lock(g_events_mutex);
  auto d = reinterpret_cast<abi::Device>(static_cast<uintptr_t>(index + 1));
  for (auto& s : g_sets)
    for (abi::Device r : s->devices)
      if (r == d) s->pending.push_back(xid_event(d, xid));
}

EXPORT abi::Return nvmlDeviceGetViolationStatus(abi::Device d, unsigned policy, abi::ViolationTime* t) {
  if (!t || policy > abi::kPerfPolicyThermal) return abi::kErrorInvalidArgument;
  unsigned pct = 0;
  abi::Return rc = value_as(d, policy == abi::kPerfPolicyPower ? "viol_power_pct" : "viol_thermal_pct", &pct, "0");
  if (rc != abi::kSuccess) return rc;
  t->referenceTime = next_reference_us();
  t->violationTime = (t->referenceTime - g_loaded_us) * 1000 * pct / 100;
  return abi::kSuccess;
}

EXPORT abi::Return nvmlDeviceGetRetiredPages(abi::Device d, unsigned cause, unsigned* count, unsigned long long* addresses) {
  if (!count) return abi::kErrorInvalidArgument;
  unsigned n = 0;
  abi::Return rc = value_as(d, cause == abi::kRetiredDbe ? "retired_dbe" : "retired_sbe", &n, "0");
  if (rc != abi::kSuccess) return rc;
  bool fits = *count >= n;
  if (fits && addresses)
    for (unsigned i = 0; i < n; ++i) addresses[i] = 0x1000ull * (i + 1);
  *count = n;
  return fits ? abi::kSuccess : abi::kErrorInsufficientSize;
}

EXPORT abi::Return nvmlDeviceGetRetiredPagesPendingStatus(abi::Device d, unsigned* pending) {
  return value_as(d, "retired_pending", pending, "0");
}

EXPORT abi::Return nvmlDeviceGetProcessUtilization(abi::Device d, abi::ProcessUtilizationSample* out, unsigned* count,
                                                   unsigned long long last_seen_us) {
  Gpu* g = gpu_of(d);
  if (!g || !count) return abi::kErrorInvalidArgument;
  unsigned long long ignored = 0;
  if (abi::Return rc = value(d, "proc_util", &ignored, "0"); rc != abi::kSuccess) return rc;
  const unsigned long long ts = now_us();
  std::vector<abi::ProcessUtilizationSample> samples;
  unsigned index = static_cast<unsigned>(reinterpret_cast<uintptr_t>(d) - 1);
  for (const Proc& p : g_scenario.procs) {
    std::string sm = get(p.kv, "sm");
    if (p.gpu != index || sm.empty() || ts <= last_seen_us) continue;
    // Two samples per process, the older one with another value: callers must keep the newest.
    samples.push_back({p.pid, ts - 500000, 1, 0, 0, 0});
    samples.push_back({p.pid, ts, static_cast<unsigned>(std::stoul(sm)), 0, 0, 0});
  }
  if (samples.empty()) return abi::kErrorNotFound;
  if (!out || *count < samples.size()) {
    *count = static_cast<unsigned>(samples.size());
    return abi::kErrorInsufficientSize;
  }
  for (size_t i = 0; i < samples.size(); ++i) out[i] = samples[i];
  *count = static_cast<unsigned>(samples.size());
  return abi::kSuccess;
}

#ifndef FAKE_NVML_OLD_DRIVER
EXPORT abi::Return nvmlDeviceGetJpgUtilization(abi::Device d, unsigned* u, unsigned* period) {
  if (period) *period = 167000;
  return value_as(d, "jpg", u, "0");
}
EXPORT abi::Return nvmlDeviceGetOfaUtilization(abi::Device d, unsigned* u, unsigned* period) {
  if (period) *period = 167000;
  return value_as(d, "ofa", u, "0");
}

EXPORT abi::Return nvmlDeviceGetRemappedRows(abi::Device d, unsigned* corr, unsigned* unc, unsigned* pending, unsigned* failure) {
  abi::Return rc = value_as(d, "remap_corr", corr, "0");
  if (rc == abi::kSuccess) rc = value_as(d, "remap_unc", unc, "0");
  if (rc == abi::kSuccess) rc = value_as(d, "remap_pending", pending, "0");
  if (rc == abi::kSuccess) rc = value_as(d, "remap_failure", failure, "0");
  return rc;
}

EXPORT abi::Return nvmlEventSetCreate(abi::EventSet* out) {
  if (!out) return abi::kErrorInvalidArgument;
  std::lock_guard<std::mutex> lock(g_events_mutex);
  g_sets.push_back(std::make_unique<EventSet>());
  *out = reinterpret_cast<abi::EventSet>(g_sets.back().get());
  return abi::kSuccess;
}

EXPORT abi::Return nvmlDeviceRegisterEvents(abi::Device d, unsigned long long types, abi::EventSet handle) {
  Gpu* g = gpu_of(d);
  if (!g) return abi::kErrorInvalidArgument;
  if (get(g->kv, "lost") == "1") return abi::kErrorGpuIsLost;
  std::string xid = get(g->kv, "xid");
  if (xid == "na") return abi::kErrorNotSupported;
  std::lock_guard<std::mutex> lock(g_events_mutex);
  EventSet* set = set_of(handle);
  if (!set || !(types & abi::kEventTypeXidCriticalError)) return abi::kErrorInvalidArgument;
  set->devices.push_back(d);
  if (!xid.empty()) set->pending.push_back(xid_event(d, std::stoull(xid)));
  return abi::kSuccess;
}

// Never blocks, whatever the timeout: the callers under test must not rely on waiting here.
EXPORT abi::Return nvmlEventSetWait_v2(abi::EventSet handle, abi::EventData* data, unsigned /*timeout_ms*/) {
  std::lock_guard<std::mutex> lock(g_events_mutex);
  EventSet* set = set_of(handle);
  if (!set || !data) return abi::kErrorInvalidArgument;
  read_xid_files(*set);
  if (set->pending.empty()) return abi::kErrorTimeout;
  *data = set->pending.front();
  set->pending.pop_front();
  return abi::kSuccess;
}

EXPORT abi::Return nvmlEventSetFree(abi::EventSet handle) {
  std::lock_guard<std::mutex> lock(g_events_mutex);
  for (auto it = g_sets.begin(); it != g_sets.end(); ++it)
    if (reinterpret_cast<abi::EventSet>(it->get()) == handle) {
      g_sets.erase(it);
      return abi::kSuccess;
    }
  return abi::kErrorInvalidArgument;
}
#endif
