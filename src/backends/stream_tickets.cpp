#include "gpumem/stream_tickets.hpp"

namespace gpumem {

EventHandle StreamTickets::record(StreamId stream) {
  std::lock_guard lock(mutex_);
  EventHandle h;
  if (!free_.empty()) {
    h = free_.back();
    free_.pop_back();
  } else {
    h = events_.size();
    events_.push_back({});
  }
  events_[h] = Event{stream, ++recorded_[stream], true};
  if (idle_.count(stream)) completed_[stream] = recorded_[stream];
  return h;
}

bool StreamTickets::done(EventHandle event) const {
  if (!manual_) return true;
  std::lock_guard lock(mutex_);
  if (event >= events_.size() || !events_[event].live) return true;
  const Event& e = events_[event];
  auto it = completed_.find(e.stream);
  return it != completed_.end() && it->second >= e.ticket;
}

void StreamTickets::release(EventHandle event) noexcept {
  std::lock_guard lock(mutex_);
  if (event >= events_.size() || !events_[event].live) return;
  events_[event].live = false;
  free_.push_back(event);
}

void StreamTickets::complete(StreamId stream, std::uint64_t* syncs) {
  std::lock_guard lock(mutex_);
  if (syncs) BackendCallCounts::add_shared(*syncs, 1);
  auto it = recorded_.find(stream);
  if (it != recorded_.end()) completed_[stream] = it->second;
}

void StreamTickets::idle(StreamId stream) {
  std::lock_guard lock(mutex_);
  idle_.insert(stream);
  auto it = recorded_.find(stream);
  if (it != recorded_.end()) completed_[stream] = it->second;
}

void StreamTickets::complete_all(std::uint64_t* syncs) {
  std::lock_guard lock(mutex_);
  if (syncs) BackendCallCounts::add_shared(*syncs, 1);
  for (auto& [stream, ticket] : recorded_) completed_[stream] = ticket;
}

std::size_t StreamTickets::pending() const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const Event& e : events_) n += e.live;
  return n;
}

}  // namespace gpumem
