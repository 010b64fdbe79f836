// Stream-ordered events for backends whose work is synchronous (sim, host): an event is a ticket on its
// stream, done once the stream's completed ticket reached it. Without manual control every event is done
// at once; with it, a stream's events complete only when complete() or complete_all() says so (tests use
// this to keep blocks "in use" on other streams). Thread-safe.
#pragma once
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gpumem/backend.hpp"

namespace gpumem {

class StreamTickets {
 public:
  explicit StreamTickets(bool manual) : manual_(manual) {}

  EventHandle record(StreamId stream);
  bool done(EventHandle event) const;
  void release(EventHandle event) noexcept;
  // Every event recorded so far (on one stream / on all) is done; `syncs` is counted under the lock.
  void complete(StreamId stream, std::uint64_t* syncs = nullptr);
  void complete_all(std::uint64_t* syncs = nullptr);
  // Events recorded on `stream` from now on are done at once (no work is queued there any more).
  void idle(StreamId stream);
  std::size_t pending() const;  // recorded and not yet released

 private:
  struct Event {
    StreamId stream;
    std::uint64_t ticket;
    bool live;
  };
  bool manual_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::vector<EventHandle> free_;
  std::unordered_map<StreamId, std::uint64_t> recorded_, completed_;
  std::unordered_set<StreamId> idle_;
};

}  // namespace gpumem
