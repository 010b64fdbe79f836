// The allocator's event stream: what an Allocator did, in the order it made it effective.
//
// Contract for observers (AllocatorObserver::on_event):
//  - Called synchronously on the thread that made the change, with the allocator's internal lock of
//    the stream pool (and, for physical events, of its physical memory) held. So events of one address
//    arrive in order: a free is reported while the block is still owned, before any thread can be handed
//    the same address again.
//  - Must be fast, must not throw (it is noexcept: an escaping exception terminates), and must never
//    call back into the allocator that emits it (its locks are held: that would deadlock).
//  - With no observer registered the hot path costs one relaxed atomic load.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gpumem/backend.hpp"
#include "gpumem/errors.hpp"

namespace gpumem {

enum class EventKind : std::uint8_t {
  alloc,           // a block was handed out: addr, size (rounded), requested
  free_requested,  // the program freed it: addr, size, requested (still owned until free_completed)
  free_completed,  // the block is reusable (at once, or after its other streams passed the free)
  segment_alloc,   // a plain device allocation (non-VMM backends): addr, size
  segment_free,    // a plain device allocation was given back
  segment_map,     // physical memory mapped at addr..addr+size (VMM)
  segment_unmap,   // a mapping removed by empty_cache / the retry
  stitch,          // physical pages behind free ranges were lent to a new block: size bytes, addr = the hole
  give_back,       // physical chunks returned to the device: size bytes
  oom,             // an allocation failed: size = requested, oom = the state
};
const char* event_kind_name(EventKind kind) noexcept;

struct MemoryEvent {
  EventKind kind = EventKind::alloc;
  int device = 0;
  DevicePtr addr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  StreamId stream = 0;
  const OutOfMemoryError::State* oom = nullptr;  // only for EventKind::oom
};

class AllocatorObserver {
 public:
  virtual ~AllocatorObserver() = default;
  virtual void on_event(const MemoryEvent& event) noexcept = 0;
};

}  // namespace gpumem
