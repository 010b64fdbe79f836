// The C ABI (include/gpumem/gpumem.h) over the default allocators. libgpumem.so exports only these.
#include "gpumem/gpumem.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <unistd.h>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "api/context_hook.hpp"
#include "api/ipc.hpp"
#include "api/registry_internal.hpp"
#include "api/status.hpp"
#include "api/torch_oom.hpp"
#include "api/trace_recorder.hpp"
#include "control/server.hpp"
#include "gpumem/memory.hpp"

namespace {

using namespace gpumem;

using api::copy_out;
using api::status_of_current_exception;
using api::guarded;
using api::guarded_size;
using api::guarded_text;
using api::tls_last_error;

StreamId stream_id(void* stream) { return reinterpret_cast<StreamId>(stream); }

std::atomic<gpumem_oom_observer_fn> oom_observer{nullptr};

void notify_oom_observer(int device, std::size_t size, const OutOfMemoryError& e) {
  if (gpumem_oom_observer_fn observer = oom_observer.load(std::memory_order_acquire))
    // As PyTorch's observers: the memory the process may use (its limit, else the device's total) third.
    observer(device < 0 ? current_device() : device, size, e.state().limit ? e.state().limit : e.state().device_total,
             e.state().device_free);
}

// The fraction last set per device, so get_per_process_memory_fraction returns it exactly (the limit it
// became is rounded); 0 (never a valid fraction) when none was set through the fraction calls.
constexpr int kFractionSlots = 64;
std::atomic<double> set_fractions[kFractionSlots] = {};
void remember_fraction(int device, double fraction) {
  int d = device < 0 ? current_device() : device;
  if (d >= 0 && d < kFractionSlots) set_fractions[d].store(fraction, std::memory_order_relaxed);
}

}  // namespace

namespace gpumem::api {
void set_last_error(const std::string& sentence) { tls_last_error = sentence; }
}  // namespace gpumem::api

extern "C" {

const char* gpumem_version(void) { return "0.1.0"; }
const char* gpumem_last_error(void) { return tls_last_error.c_str(); }
const char* gpumem_oom_marker(void) { return GPUMEM_OOM_MARKER; }
int gpumem_torch_oom_available(void) { return api::c10_out_of_memory_available() ? 1 : 0; }
int gpumem_torch_enable_cache_info(void) { return api::enable_torch_cache_info() ? 1 : 0; }

int gpumem_set_oom_observer(gpumem_oom_observer_fn observer) {
  oom_observer.store(observer, std::memory_order_release);
  return GPUMEM_OK;
}

void* gpumem_malloc(ssize_t size, int device, void* stream) {
  if (size < 0) {
    tls_last_error = "gpumem: negative allocation size " + std::to_string(size);
    throw std::invalid_argument(tls_last_error);
  }
  try {
    api::run_context_hook();
    return default_allocator(device).allocate(std::size_t(size), stream_id(stream));
  } catch (const OutOfMemoryError& e) {
    tls_last_error = e.what();
    notify_oom_observer(device, std::size_t(size), e);
    api::throw_torch_out_of_memory(e);
  } catch (const std::exception& e) {
    tls_last_error = e.what();
    throw;
  }
}

void gpumem_free(void* ptr, size_t /*size*/, int device, void* stream) {
  if (!ptr) return;
  Allocator* a = find_default_allocator(device);
  if (!a) a = owner_of(ptr);
  if (!a) {
    tls_last_error = "gpumem: free of a pointer no gpumem allocator handed out";
    return;
  }
  const FreeResult result = a->try_deallocate(ptr, stream_id(stream));
  if (result == FreeResult::ok) return;
  // Another device's block, freed under the wrong current device: its owner takes it back.
  if (result == FreeResult::unknown_pointer)
    if (Allocator* owner = owner_of(ptr); owner && owner != a) return owner->deallocate(ptr, stream_id(stream));
  a->deallocate(ptr, stream_id(stream));  // reports it (a double free, a pointer nobody handed out) and counts it
}

void gpumem_empty_cache(void) { gpumem_empty_cache_checked(); }
void gpumem_reset(void) { gpumem_empty_cache_checked(); }
void gpumem_init(int /*device_count*/) {}  // allocators are made per device on first use

void gpumem_set_memory_fraction(double fraction, int device) {
  // Through gpumem_set_fraction, so the fraction is remembered for gpumem_get_fraction.
  if (gpumem_set_fraction(fraction, device) != GPUMEM_OK) throw std::runtime_error(tls_last_error);
}

void gpumem_record_stream(void* ptr, void* stream) { gpumem_record_stream_checked(ptr, stream); }

void* gpumem_base_alloc(void* ptr, size_t* size) {
  // PyTorch's IPC sharing (getBaseAllocation) sends the block's start and ptr's offset into it.
  auto [base, bytes] = live_block_containing(ptr);
  if (size) *size = bytes;
  return base ? base : ptr;
}

int gpumem_allocate(size_t size, int device, void* stream, void** out) {
  if (!out) {
    tls_last_error = "gpumem_allocate: out must not be NULL";
    return GPUMEM_E_INVALID;
  }
  *out = nullptr;
  return guarded([&] {
    api::run_context_hook();
    try {
      *out = default_allocator(device).allocate(size, stream_id(stream));
    } catch (const OutOfMemoryError& e) {
      notify_oom_observer(device, size, e);
      throw;
    }
  });
}

int gpumem_deallocate(void* ptr, int device, void* stream) {
  if (!ptr) return GPUMEM_OK;
  Allocator* a = find_default_allocator(device);
  if (!a) a = owner_of(ptr);
  if (!a) {
    tls_last_error = "gpumem_deallocate: device " + std::to_string(device) + " has no allocator";
    return GPUMEM_E_INVALID;
  }
  FreeResult result = a->try_deallocate(ptr, stream_id(stream));
  if (result == FreeResult::unknown_pointer)  // another device's block (graph trees free without a device guard)
    if (Allocator* owner = owner_of(ptr); owner && owner != a) result = owner->try_deallocate(ptr, stream_id(stream));
  switch (result) {
    case FreeResult::ok:
    case FreeResult::null_pointer:
      return GPUMEM_OK;
    case FreeResult::unknown_pointer:
      tls_last_error = "gpumem_deallocate: pointer was not handed out by this device's allocator";
      return GPUMEM_E_INVALID;
    case FreeResult::double_free:
      tls_last_error = "gpumem_deallocate: double free";
      return GPUMEM_E_INVALID;
  }
  return GPUMEM_E_INTERNAL;
}

int gpumem_trace_start(const char* path) {
  return guarded([&] {
    if (!path || !*path) throw std::invalid_argument("gpumem: gpumem_trace_start needs a file path");
    api::trace_start(path);
  });
}

long gpumem_trace_stop(void) {
  long events = 0;
  int rc = guarded([&] { events = long(api::trace_stop()); });
  return rc == GPUMEM_OK ? events : rc;
}

int gpumem_set_limit(size_t bytes, int device) {
  return guarded([&] {
    default_allocator(device).set_limit(bytes);
    remember_fraction(device, 0.0);
  });
}

int gpumem_set_fraction(double fraction, int device) {
  return guarded([&] {
    set_per_process_memory_fraction(fraction, device);
    remember_fraction(device, fraction);
  });
}

int gpumem_get_fraction(int device, double* fraction) {
  return guarded([&] {
    if (!fraction) throw std::invalid_argument("gpumem_get_fraction: fraction must not be NULL");
    Allocator& a = default_allocator(device);
    int d = device < 0 ? current_device() : device;
    double remembered = d < kFractionSlots ? set_fractions[d].load(std::memory_order_relaxed) : 0.0;
    if (remembered > 0.0) {
      *fraction = remembered;
      return;
    }
    std::size_t total = a.mem_get_info().total;
    *fraction = a.limit() && total ? std::min(1.0, double(a.limit()) / double(total)) : 1.0;
  });
}

int gpumem_reset_accumulated_memory_stats(int device) {
  return guarded([&] { default_allocator(device).reset_accumulated_stats(); });
}

int gpumem_cache_info(int device, size_t* largest_block) {
  return guarded([&] {
    if (!largest_block) throw std::invalid_argument("gpumem_cache_info: largest_block must not be NULL");
    Allocator& a = default_allocator(device);
    // As PyTorch's allocator answers: the largest cached free block, or what the device could still give.
    std::size_t grow = a.mem_get_info().free;
    if (std::size_t limit = a.limit()) {
      std::size_t reserved = memory_reserved(device);
      grow = std::min(grow, limit > reserved ? limit - reserved : 0);
    }
    *largest_block = std::max(a.largest_free_block(), grow);
  });
}

int gpumem_record_stream_checked(void* ptr, void* stream) {
  return guarded([&] {
    Allocator* a = owner_of(ptr);
    if (!a) throw std::invalid_argument("gpumem: record_stream on a pointer no gpumem allocator handed out");
    a->record_stream(ptr, stream_id(stream));
  });
}

int gpumem_empty_cache_checked(void) {
  return guarded([] { empty_cache(); });
}

int gpumem_set_current_device(int device) {
  return guarded([&] { set_current_device(device); });
}

int gpumem_backend_name(int device, char* buf, size_t len) {
  return guarded_text(buf, len, [&] { return std::string(default_allocator(device).backend().name()); });
}

int gpumem_stop_requested(void) { return control::stop_requested() ? 1 : 0; }

size_t gpumem_memory_allocated(int device) {
  return guarded_size([&] { return memory_allocated(device); });
}
size_t gpumem_memory_reserved(int device) {
  return guarded_size([&] { return memory_reserved(device); });
}
size_t gpumem_max_memory_allocated(int device) {
  return guarded_size([&] { return max_memory_allocated(device); });
}
size_t gpumem_max_memory_reserved(int device) {
  return guarded_size([&] { return max_memory_reserved(device); });
}

int gpumem_reset_peak_memory_stats(int device) {
  return guarded([&] { reset_peak_memory_stats(device); });
}

int gpumem_mem_get_info(int device, size_t* free_bytes, size_t* total_bytes) {
  return guarded([&] {
    MemInfo info = default_allocator(device).mem_get_info();
    if (free_bytes) *free_bytes = info.free;
    if (total_bytes) *total_bytes = info.total;
  });
}

int gpumem_memory_stats_json(int device, char* buf, size_t len) {
  return guarded_text(buf, len, [&] {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [key, value] : memory_stats(device)) j[key] = value;
    return j.dump();
  });
}

int gpumem_memory_summary(int device, char* buf, size_t len) {
  return guarded_text(buf, len, [&] { return memory_summary(device); });
}

int gpumem_ipc_export(void* ptr, char* buf, size_t len) {
  try {
    api::ExportedAllocation e = api::ipc_export(ptr);
    if (!buf || len <= e.json.size()) {
      for (int fd : e.fds) close(fd);  // the caller asks again with room: fresh descriptors then
    }
    return copy_out(e.json, buf, len);
  } catch (...) {
    return api::status_of_current_exception();
  }
}

int gpumem_ipc_open(int device, const char* description, void** out) {
  if (!out || !description) {
    tls_last_error = "gpumem_ipc_open: description and out must not be NULL";
    return GPUMEM_E_INVALID;
  }
  *out = nullptr;
  return guarded([&] { *out = api::ipc_open(device, description); });
}

int gpumem_ipc_close(void* ptr) {
  return guarded([&] { api::ipc_close(ptr); });
}

}  // extern "C"
