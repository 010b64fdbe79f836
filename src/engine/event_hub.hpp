// The observers of one allocator. emit() costs one relaxed load while nobody observes; with observers
// it takes a shared lock (observers are added and removed rarely, under the exclusive lock).
#pragma once
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "gpumem/events.hpp"

namespace gpumem::engine {

class EventHub {
 public:
  explicit EventHub(int device) : device_(device) {}

  bool active() const noexcept { return active_.load(std::memory_order_relaxed); }

  void add(std::shared_ptr<AllocatorObserver> observer) {
    std::unique_lock lock(mutex_);
    if (std::find(observers_.begin(), observers_.end(), observer) == observers_.end())
      observers_.push_back(std::move(observer));
    active_.store(true, std::memory_order_relaxed);
  }
  void remove(const AllocatorObserver* observer) {
    std::unique_lock lock(mutex_);
    std::erase_if(observers_, [&](const auto& o) { return o.get() == observer; });
    active_.store(!observers_.empty(), std::memory_order_relaxed);
  }

  // Fills in the device and hands the event to every observer (in registration order).
  void emit(MemoryEvent event) const noexcept {
    if (!active()) return;
    event.device = device_;
    std::shared_lock lock(mutex_);
    for (const auto& o : observers_) o->on_event(event);
  }
  void emit(EventKind kind, DevicePtr addr, std::size_t size, std::size_t requested, StreamId stream) const noexcept {
    if (!active()) return;
    MemoryEvent e;
    e.kind = kind;
    e.addr = addr;
    e.size = size;
    e.requested = requested;
    e.stream = stream;
    emit(e);
  }

 private:
  int device_;
  std::atomic<bool> active_{false};
  mutable std::shared_mutex mutex_;
  std::vector<std::shared_ptr<AllocatorObserver>> observers_;
};

}  // namespace gpumem::engine
