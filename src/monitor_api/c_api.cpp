// libgpumem_monitor.so: the C ABI of include/gpumem/gpumem_monitor.h over the monitor Sampler and the
// top/summary Gatherer (the code behind `gpumem --json --full`), with their state kept between calls.
#include <gpumem/gpumem_monitor.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "monitor/common.hpp"
#include "monitor/sampler.hpp"
#include "nvml/library.hpp"
#include "tui/sample_json.hpp"

namespace {

using namespace gpumem;

constexpr int kKnownFlags =
    GPUMEM_MONITOR_PROCESSES | GPUMEM_MONITOR_ALLOCATORS | GPUMEM_MONITOR_HOLDERS | GPUMEM_MONITOR_EXTRAS;

// One sampler per set of flags (what the sampler reads differs), all over one open NVML: %CPU and the
// device-node scan keep their own pacing per caller kind.
struct Reader {
  monitor::Sampler sampler;
  tui::Gatherer gatherer;
};

struct State {
  std::mutex mutex;
  std::shared_ptr<const nvml::Nvml> nvml;
  std::vector<monitor::GpuRef> gpus;
  std::map<int, std::unique_ptr<Reader>> readers;
};

State& state() {
  static State* s = new State;  // never destroyed: a sample may run while the process exits
  return *s;
}

Reader& reader_for(State& s, int flags) {
  auto it = s.readers.find(flags);
  if (it != s.readers.end()) return *it->second;
  if (!s.nvml) {
    auto nvml = nvml::Nvml::open();  // throws NvmlUnavailableError: nothing is kept, the next call retries
    s.gpus = monitor::select_gpus(*nvml, "");
    s.nvml = std::move(nvml);
  }
  monitor::SamplerOptions options;
  options.processes = (flags & GPUMEM_MONITOR_PROCESSES) != 0;
  options.extras = (flags & GPUMEM_MONITOR_EXTRAS) != 0;
  auto r = std::make_unique<Reader>(Reader{monitor::make_sampler(s.nvml, s.gpus, options),
                                           tui::Gatherer((flags & GPUMEM_MONITOR_ALLOCATORS) != 0,
                                                         (flags & GPUMEM_MONITOR_HOLDERS) != 0)});
  return *s.readers.emplace(flags, std::move(r)).first->second;
}

char* copy_text(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out) std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

int fail(int status, const std::string& why, char** out_json, size_t* out_len) {
  *out_json = copy_text(why);
  *out_len = *out_json ? why.size() : 0;
  return status;
}

}  // namespace

extern "C" {

int gpumem_monitor_abi_version(void) { return GPUMEM_MONITOR_ABI_VERSION; }

int gpumem_monitor_sample_json(int flags, char** out_json, size_t* out_len) {
  if (!out_json || !out_len) return GPUMEM_MONITOR_BAD_ARGUMENT;
  *out_json = nullptr;
  *out_len = 0;
  if (flags & ~kKnownFlags)
    return fail(GPUMEM_MONITOR_BAD_ARGUMENT, "gpumem_monitor_sample_json: unknown flags " + std::to_string(flags) + ".",
                out_json, out_len);
  if ((flags & (GPUMEM_MONITOR_ALLOCATORS | GPUMEM_MONITOR_HOLDERS)) && !(flags & GPUMEM_MONITOR_PROCESSES))
    flags |= GPUMEM_MONITOR_PROCESSES;  // allocator figures and holders are rows of the process list
  try {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    Reader& r = reader_for(s, flags);
    tui::TopData data;
    r.gatherer.gather(r.sampler, data, nullptr);
    // Process and GPU names may be any bytes: replaced, or one bad name would fail the whole sample.
    std::string text = tui::sample_json(data).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    *out_json = copy_text(text);
    if (!*out_json) return fail(GPUMEM_MONITOR_FAILED, "gpumem: out of host memory for the sample.", out_json, out_len);
    *out_len = text.size();
    return GPUMEM_MONITOR_OK;
  } catch (const nvml::NvmlUnavailableError& e) {
    return fail(GPUMEM_MONITOR_NO_DEVICE, e.what(), out_json, out_len);
  } catch (const monitor::NoSuchGpuError& e) {
    return fail(GPUMEM_MONITOR_NO_DEVICE, e.what(), out_json, out_len);
  } catch (const std::exception& e) {
    return fail(GPUMEM_MONITOR_FAILED, std::string("gpumem: the sample failed: ") + e.what(), out_json, out_len);
  } catch (...) {
    return fail(GPUMEM_MONITOR_FAILED, "gpumem: the sample failed.", out_json, out_len);
  }
}

void gpumem_monitor_free(char* text) { std::free(text); }

void gpumem_monitor_reset(void) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.readers.clear();
  s.gpus.clear();
  s.nvml.reset();
}

}  // extern "C"
