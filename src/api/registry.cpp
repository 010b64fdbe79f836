// Process-wide default allocators (include/gpumem/memory.hpp): one per device, made on first use from
// the backend factory (GPUMEM_BACKEND, or set_backend_factory()). Settings from the environment, read
// when a device's allocator is made: GPUMEM_LIMIT (a size, "12GiB") and GPUMEM_FRACTION (0 < f <= 1).
// The first allocator also starts the control server (src/control; off with GPUMEM_CONTROL=0), and each
// allocator of a device other processes can share asks them to release their cache before it reports out
// of memory (off with GPUMEM_COOPERATIVE=0).
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>
#include <functional>

#include "api/env_config.hpp"
#include "api/registry_internal.hpp"
#include "gpumem/limits.hpp"
#include "api/trace_recorder.hpp"
#include "control/client.hpp"
#include "control/server.hpp"
#include "gpumem/cuda_backend.hpp"
#include "gpumem/host_backend.hpp"
#include "gpumem/memory.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem {
namespace {


// Leaked on purpose: allocators must outlive every static destructor that may still free memory
// (PyTorch frees tensors at interpreter exit), and the driver may be gone by then anyway.
struct Registry {
  std::mutex mutex;  // creation only; lookups read the atomics
  BackendFactory factory;
  bool factory_used = false;
  std::array<std::atomic<Allocator*>, kMaxDevices> allocators{};
  std::array<std::string, kMaxDevices> device_keys;  // written before the allocator is published
  std::array<std::optional<control::PendingLimit>, kMaxDevices> pending_limits;  // gpumem limit before first use
  std::vector<std::function<void(int, Allocator&)>> listeners;  // on_new_default_allocator
};

Registry& registry() {
  static Registry* instance = new Registry;
  return *instance;
}

thread_local int tls_current_device = 0;

int resolve(int device) {
  if (device == -1) device = tls_current_device;  // -1 alone means the current device (gpumem.h)
  if (device < 0 || device >= kMaxDevices)
    throw Error("gpumem: device index " + std::to_string(device) + " is out of range (0.." +
                std::to_string(kMaxDevices - 1) + ", or -1 for the current device)");
  return device;
}

std::shared_ptr<Backend> backend_from_environment(int device) {
  std::string kind = api::env_backend();
  if (kind == "cuda") {
    // A limit says memory is what counts: 2 MiB pages let stitching and release use every free page
    // (the limited runs of BENCHMARKS.md complete at 2 MiB and run out of memory at 16 MiB), at some
    // speed; GPUMEM_CUDA_PAGE_MIB, when set, decides. 0: the backend's default.
    const bool limited = api::env_limit().value_or(0) > 0 || api::env_fraction("GPUMEM_FRACTION").has_value();
    const std::size_t page_bytes = api::env_cuda_page_bytes().value_or(limited ? std::size_t(2) << 20 : 0);
    api::env_map_ahead();  // a bad value is refused here, before the backend reads it
    return make_cuda_backend(device, CudaMemoryMode::virtual_memory, page_bytes);
  }
  if (kind == "cuda-plain") return make_cuda_backend(device, CudaMemoryMode::plain);
  if (kind == "host") {
    HostBackendOptions options;
    options.device = device;
    if (auto capacity = api::env_size("GPUMEM_HOST_CAPACITY")) options.capacity = *capacity;
    if (const char* shared = std::getenv("GPUMEM_HOST_SHARED"); shared && *shared)
      options.shared_capacity_file = shared;
    return std::make_shared<HostBackend>(options);
  }
  if (kind == "sim") {
    SimBackendOptions options;
    options.device = device;
    if (auto capacity = api::env_size("GPUMEM_SIM_CAPACITY")) options.capacity = *capacity;
    return std::make_shared<SimBackend>(options);
  }
  throw Error("gpumem: GPUMEM_BACKEND='" + kind + "' is not one of cuda, cuda-plain, host, sim");
}

// Names the physical device so that processes on the same one find each other; "" when none can share it.
std::string device_key(const Backend& backend, int device) {
  std::string name = backend.name();
  if (name == "host") {
    const char* shared = std::getenv("GPUMEM_HOST_SHARED");
    return shared && *shared ? "host-shared:" + std::string(shared) : std::string();
  }
  if (name.rfind("cuda", 0) != 0) return {};
  // CUDA_VISIBLE_DEVICES renumbers devices per process: name the entry it maps this index to.
  std::string visible = std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "";
  if (visible.empty()) return "cuda:" + std::to_string(device);
  std::size_t start = 0;
  for (int i = 0; i < device && start != std::string::npos; ++i) {
    start = visible.find(',', start);
    if (start != std::string::npos) ++start;
  }
  if (start == std::string::npos) return {};
  return "cuda:" + visible.substr(start, visible.find(',', start) - start);
}

bool cooperative_enabled() { return api::env_switch("GPUMEM_COOPERATIVE", true); }

Allocator* existing(int device) {
  return registry().allocators[std::size_t(device)].load(std::memory_order_acquire);
}

Allocator& create(int device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (Allocator* a = existing(device)) return *a;
  r.factory_used = true;
  api::env_check_switches();  // whatever the backend: a malformed switch is refused, never taken as on
  std::shared_ptr<Backend> backend = r.factory ? r.factory(device) : backend_from_environment(device);
  if (!backend) throw BackendUnavailableError("gpumem: the backend factory returned no backend for device " +
                                              std::to_string(device));
  AllocatorConfig config;
  config.limit_bytes = api::env_limit().value_or(0);
  std::optional<double> fraction = api::env_fraction("GPUMEM_FRACTION");
  std::string key = device_key(*backend, device);
  auto allocator = std::make_unique<Allocator>(std::move(backend), config);
  if (fraction) allocator->set_memory_fraction(*fraction);
  if (auto& pending = r.pending_limits[std::size_t(device)]) {  // `gpumem limit` outranks the environment
    // Checked before it was kept, but only this device's size tells whether a fraction of it holds a
    // page: one that cannot apply is dropped with a warning, never left to fail every allocation here.
    try {
      if (pending->fraction) allocator->set_memory_fraction(*pending->fraction);
      else allocator->set_limit(std::size_t(pending->bytes.value_or(0)));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpumem: the limit `gpumem limit` set for device %d cannot apply and is dropped: %s\n",
                   device, e.what());
    }
    pending.reset();
  }
  if (!key.empty() && cooperative_enabled())
    allocator->set_release_others_hook([key](std::size_t) {
      // Up to 3 s each: giving back tens of GiB takes a process about a second (~40 us a page).
      return control::ask_others_to_release(key, std::chrono::milliseconds(3000)) > 0;
    });
  r.device_keys[std::size_t(device)] = key;
  Allocator* raw = allocator.release();
  // The trace recorder observes it before other threads can see it (they would allocate unrecorded
  // meanwhile: under load a whole thread's work was missing from a trace), and again after, for a trace
  // started in between (observers are added once).
  api::trace_attach(device, *raw);
  for (const auto& listener : r.listeners) listener(device, *raw);
  r.allocators[std::size_t(device)].store(raw, std::memory_order_release);
  api::trace_attach(device, *raw);
  return *raw;
}

// The control server's view of the registry: every allocator made so far.
void start_control_server() {
  static std::once_flag once;
  std::call_once(once, [] {
    control::ServerHooks hooks;
    hooks.devices = [] {
      std::vector<control::ServedDevice> out;
      for (int d = 0; d < kMaxDevices; ++d)
        if (Allocator* a = existing(d)) out.push_back({d, a, registry().device_keys[std::size_t(d)]});
      return out;
    };
    hooks.limit_unmade = [](int device, const control::PendingLimit& limit) {
      if (device < 0 || device >= kMaxDevices)
        throw std::invalid_argument("device " + std::to_string(device) + " is out of range (at most " +
                                    std::to_string(kMaxDevices - 1) + ")");
      // Checked now, as `gpumem limit` checks it: kept unchecked, one the allocator refuses would make
      // every allocation on that device fail when it is made.
      if (limit.fraction && !(*limit.fraction >= kMinFraction && *limit.fraction <= 1))
        throw std::invalid_argument("a fraction of the device is a number in [0.0001, 1]");
      if (limit.bytes && *limit.bytes && (*limit.bytes < kMinLimitBytes || *limit.bytes > kMaxLimitBytes))
        throw std::invalid_argument("a limit is 0 (none) or between 2 MiB and 1 EiB");
      Registry& r = registry();
      std::lock_guard lock(r.mutex);
      if (existing(device)) return false;
      r.pending_limits[std::size_t(device)] = limit;
      return true;
    };
    std::string why;
    // Off or impossible: the program runs without it; said once when it was not asked to be off, or
    // `gpumem stats` would only report that the process has no control channel.
    if (!control::start_server(std::move(hooks), why) && why != "GPUMEM_CONTROL=0")
      std::fprintf(stderr, "gpumem: no control channel for this process (gpumem stats, clear, limit and stop cannot reach it): %s\n",
                   why.c_str());
  });
}

}  // namespace

void set_backend_factory(BackendFactory factory) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.factory_used)
    throw Error("gpumem: set_backend_factory() must be called before the first default allocator is made");
  r.factory = std::move(factory);
}

Allocator& default_allocator(int device) {
  device = resolve(device);
  if (Allocator* a = existing(device)) return *a;
  Allocator& made = create(device);
  start_control_server();
  return made;
}

Allocator* find_default_allocator(int device) noexcept {
  if (device == -1) device = tls_current_device;
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return existing(device);
}

Allocator* owner_of(const void* ptr) noexcept {
  for (int d = 0; d < kMaxDevices; ++d)
    if (Allocator* a = existing(d); a && a->block_size(ptr) != 0) return a;
  return nullptr;
}

void on_new_default_allocator(std::function<void(int, Allocator&)> fn) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.listeners.push_back(std::move(fn));
}

void for_each_default_allocator(const std::function<void(Allocator&)>& fn) {
  for_each_default_allocator_at([&](int, Allocator& a) { fn(a); });
}

void for_each_default_allocator_at(const std::function<void(int, Allocator&)>& fn) {
  for (int d = 0; d < kMaxDevices; ++d)
    if (Allocator* a = existing(d)) fn(d, *a);
}

std::pair<void*, std::size_t> live_block_containing(const void* ptr) noexcept {
  for (int d = 0; d < kMaxDevices; ++d) {
    Allocator* a = existing(d);
    if (!a) continue;
    try {
      if (auto found = a->live_block_containing(ptr); found.first) return found;
    } catch (...) {  // a lock that cannot be taken: not found
    }
  }
  return {nullptr, 0};
}

std::shared_ptr<Backend> make_backend(int device) {
  device = resolve(device);
  Registry& r = registry();
  BackendFactory factory;
  {
    std::lock_guard lock(r.mutex);
    r.factory_used = true;
    factory = r.factory;
  }
  std::shared_ptr<Backend> backend = factory ? factory(device) : backend_from_environment(device);
  if (!backend) throw BackendUnavailableError("gpumem: the backend factory returned no backend for device " +
                                              std::to_string(device));
  return backend;
}

void set_current_device(int device) {
  if (device < 0 || device >= kMaxDevices)
    throw std::invalid_argument("gpumem: device index " + std::to_string(device) + " is out of range (0.." +
                                std::to_string(kMaxDevices - 1) + ")");
  tls_current_device = device;
}

int current_device() { return tls_current_device; }

namespace {
// Queries on a device that never allocated answer zeros rather than starting a driver.
DeviceStats stats_of(int device) {
  Allocator* a = existing(resolve(device));
  return a ? a->stats() : DeviceStats{};
}
}  // namespace

std::size_t memory_allocated(int device) { return std::size_t(stats_of(device).allocated_bytes[0].current); }
std::size_t memory_reserved(int device) { return std::size_t(stats_of(device).reserved_bytes[0].current); }
std::size_t max_memory_allocated(int device) { return std::size_t(stats_of(device).allocated_bytes[0].peak); }
std::size_t max_memory_reserved(int device) { return std::size_t(stats_of(device).reserved_bytes[0].peak); }

void reset_peak_memory_stats(int device) {
  if (Allocator* a = existing(resolve(device))) a->reset_peak_stats();
}

void empty_cache() {
  for (int d = 0; d < kMaxDevices; ++d)
    if (Allocator* a = existing(d)) a->empty_cache();
}

void set_per_process_memory_fraction(double fraction, int device) {
  default_allocator(device).set_memory_fraction(fraction);
}

std::map<std::string, std::int64_t> memory_stats(int device) { return stats_of(device).as_map(); }

std::string memory_summary(int device, bool abbreviated) {
  return default_allocator(device).memory_summary(abbreviated);
}

}  // namespace gpumem
