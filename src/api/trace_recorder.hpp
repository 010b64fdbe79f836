// Records what the program asks of the default allocators as a gpumem-trace file, for `gpumem replay`:
// set GPUMEM_TRACE=FILE (".gz" compresses). Thread-safe; a no-op costing one relaxed load when off.
// The file is complete when the process exits normally or gpumem_trace_stop() is called.
#pragma once
#include <cstddef>
#include <string>

#include "gpumem/backend.hpp"

namespace gpumem::api {

// Starts recording into `path` (throws gpumem::Error if it cannot be created); stops a previous one.
void trace_start(const std::string& path);
// Finishes the file; returns the number of events written.
std::size_t trace_stop();
// Starts recording if GPUMEM_TRACE is set and nothing records yet (first allocation calls it).
void trace_start_from_env();
void trace_alloc(DevicePtr ptr, std::size_t size, StreamId stream) noexcept;
void trace_free(DevicePtr ptr, StreamId stream) noexcept;

// Held around an allocator call and its trace_alloc / trace_free: while recording, calls and their events
// happen under one lock, so the file holds events in the order they took effect (a free is written
// before another thread's allocation that reuses its address). Not recording: one relaxed load.
class TraceOrderGuard {
 public:
  TraceOrderGuard() noexcept;
  ~TraceOrderGuard();
  TraceOrderGuard(const TraceOrderGuard&) = delete;
  TraceOrderGuard& operator=(const TraceOrderGuard&) = delete;

 private:
  bool held_ = false;
};

}  // namespace gpumem::api
