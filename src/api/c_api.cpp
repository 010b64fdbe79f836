// The C ABI (include/gpumem/gpumem.h) over the default allocators. libgpumem.so exports only these.
#include "gpumem/gpumem.h"

#include <cstring>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "api/context_hook.hpp"
#include "api/registry_internal.hpp"
#include "api/trace_recorder.hpp"
#include "gpumem/memory.hpp"

namespace {

using namespace gpumem;

thread_local std::string tls_last_error;

// Maps the exception in flight to a status code and remembers its sentence for gpumem_last_error().
int status_of_current_exception() noexcept {
  try {
    throw;
  } catch (const OutOfMemoryError& e) {
    tls_last_error = e.what();
    return GPUMEM_E_OOM;
  } catch (const BackendError& e) {
    tls_last_error = e.what();
    return GPUMEM_E_BACKEND;
  } catch (const std::invalid_argument& e) {
    tls_last_error = e.what();
    return GPUMEM_E_INVALID;
  } catch (const Error& e) {
    tls_last_error = e.what();
    return GPUMEM_E_INVALID;
  } catch (const std::exception& e) {
    tls_last_error = std::string("gpumem: internal error: ") + e.what();
    return GPUMEM_E_INTERNAL;
  } catch (...) {
    tls_last_error = "gpumem: internal error of unknown kind";
    return GPUMEM_E_INTERNAL;
  }
}

template <typename Fn>
int guarded(Fn&& fn) noexcept {
  try {
    fn();
    return GPUMEM_OK;
  } catch (...) {
    return status_of_current_exception();
  }
}

// Copies text into buf as the header promises: NUL-terminated, truncated to fit; returns the full length.
int copy_out(const std::string& text, char* buf, size_t len) {
  if (text.size() > std::size_t(std::numeric_limits<int>::max())) throw std::length_error("gpumem: text too long");
  if (buf && len > 0) {
    std::size_t n = std::min(text.size(), len - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return int(text.size());
}

template <typename Fn>
int guarded_text(char* buf, size_t len, Fn&& fn) noexcept {
  try {
    return copy_out(fn(), buf, len);
  } catch (...) {
    return status_of_current_exception();
  }
}

// A query that cannot report failure returns 0 and leaves the reason in gpumem_last_error().
template <typename Fn>
size_t guarded_size(Fn&& fn) noexcept {
  try {
    return fn();
  } catch (...) {
    status_of_current_exception();
    return 0;
  }
}

StreamId stream_id(void* stream) { return reinterpret_cast<StreamId>(stream); }

}  // namespace

namespace gpumem::api {
void set_last_error(const std::string& sentence) { tls_last_error = sentence; }
}  // namespace gpumem::api

extern "C" {

const char* gpumem_version(void) { return "0.1.0"; }
const char* gpumem_last_error(void) { return tls_last_error.c_str(); }

void* gpumem_malloc(ssize_t size, int device, void* stream) {
  if (size < 0) {
    tls_last_error = "gpumem: negative allocation size " + std::to_string(size);
    throw std::invalid_argument(tls_last_error);
  }
  try {
    api::run_context_hook();
    return default_allocator(device).allocate(std::size_t(size), stream_id(stream));
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
  a->deallocate(ptr, stream_id(stream));
}

void gpumem_empty_cache(void) { gpumem_empty_cache_checked(); }
void gpumem_reset(void) { gpumem_empty_cache_checked(); }
void gpumem_init(int /*device_count*/) {}  // allocators are made per device on first use

void gpumem_set_memory_fraction(double fraction, int device) {
  if (gpumem_set_fraction(fraction, device) != GPUMEM_OK) throw std::runtime_error(tls_last_error);
}

void gpumem_record_stream(void* ptr, void* stream) { gpumem_record_stream_checked(ptr, stream); }

void* gpumem_base_alloc(void* ptr, size_t* size) {
  if (Allocator* a = owner_of(ptr); a && size) *size = a->block_size(ptr);
  return ptr;
}

int gpumem_allocate(size_t size, int device, void* stream, void** out) {
  if (!out) {
    tls_last_error = "gpumem_allocate: out must not be NULL";
    return GPUMEM_E_INVALID;
  }
  *out = nullptr;
  return guarded([&] {
    api::run_context_hook();
    *out = default_allocator(device).allocate(size, stream_id(stream));
  });
}

int gpumem_deallocate(void* ptr, int device, void* stream) {
  if (!ptr) return GPUMEM_OK;
  Allocator* a = find_default_allocator(device);
  if (!a) {
    tls_last_error = "gpumem_deallocate: device " + std::to_string(device) + " has no allocator";
    return GPUMEM_E_INVALID;
  }
  FreeResult result = a->try_deallocate(ptr, stream_id(stream));
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
  return guarded([&] { default_allocator(device).set_limit(bytes); });
}

int gpumem_set_fraction(double fraction, int device) {
  return guarded([&] { set_per_process_memory_fraction(fraction, device); });
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

}  // extern "C"
