// Records what the program asks of the default allocators as a gpumem-trace file, for `gpumem replay`:
// set GPUMEM_TRACE=FILE (".gz" compresses). The recorder is an observer (gpumem/events.hpp) of every
// default allocator while it records, so C++ users of the default allocators are traced too, and events
// are written in the order the allocator made them effective (a free before the address is reused).
// When off, no observer is registered. The file is complete at normal exit or gpumem_trace_stop().
// A trace holds one device: the first device to allocate writes the file named, each other device d
// writes NAME.devD.EXT beside it (said once on stderr).
#pragma once
#include <cstddef>
#include <string>

#include "gpumem/allocator.hpp"

namespace gpumem::api {

// Starts recording into `path` (throws gpumem::Error if it cannot be created); stops a previous one.
void trace_start(const std::string& path);
// Finishes the file; returns the number of events written.
std::size_t trace_stop();
// Called by the registry for each new default allocator (of device `device`): starts recording if
// GPUMEM_TRACE is set and nothing records yet, and observes the allocator while recording.
void trace_attach(int device, Allocator& allocator);

}  // namespace gpumem::api
