// Open-addressing hash map from a block's address to its record: the live-block table of a pool.
// Linear probing with backward-shift deletion, so no tombstones and lookups stay short.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/block.hpp"

namespace gpumem::engine {

class PointerMap {
 public:
  PointerMap() : slots_(64), shift_(64 - 6) {}

  Block* find(DevicePtr key) const noexcept {
    for (std::size_t i = slot_of(key);; i = (i + 1) & mask()) {
      const Slot& s = slots_[i];
      if (!s.block) return nullptr;
      if (s.key == key) return s.block;
    }
  }

  void insert(DevicePtr key, Block* block) {
    if ((size_ + 1) * 2 > slots_.size()) grow();  // at most half full: probe runs stay short
    place(key, block);
    ++size_;
  }

  bool erase(DevicePtr key) noexcept { return take(key) != nullptr; }

  // Removes key and returns its block (one probe run), or nullptr if it is not there.
  Block* take(DevicePtr key) noexcept {
    std::size_t i = slot_of(key);
    for (;; i = (i + 1) & mask()) {
      if (!slots_[i].block) return nullptr;
      if (slots_[i].key == key) break;
    }
    Block* const found = slots_[i].block;
    // Backward shift: pull later entries of the probe run into the gap.
    for (std::size_t j = (i + 1) & mask();; j = (j + 1) & mask()) {
      if (!slots_[j].block) break;
      std::size_t home = slot_of(slots_[j].key);
      bool movable = (i <= j) ? (home <= i || home > j) : (home <= i && home > j);
      if (movable) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --size_;
    return found;
  }

  std::size_t size() const noexcept { return size_; }

  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const Slot& s : slots_)
      if (s.block) fn(s.key, s.block);
  }

 private:
  struct Slot {
    DevicePtr key = 0;
    Block* block = nullptr;
  };
  std::size_t mask() const noexcept { return slots_.size() - 1; }
  std::size_t slot_of(DevicePtr key) const noexcept {
    // Fibonacci hashing: the top bits of the product are well mixed.
    return std::size_t(((std::uint64_t(key) >> 9) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void place(DevicePtr key, Block* block) noexcept {
    std::size_t i = slot_of(key);
    while (slots_[i].block) i = (i + 1) & mask();
    slots_[i] = Slot{key, block};
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    --shift_;
    for (const Slot& s : old)
      if (s.block) place(s.key, s.block);
  }

  std::vector<Slot> slots_;
  int shift_;  // 64 - log2(slots_.size())
  std::size_t size_ = 0;
};

}  // namespace gpumem::engine
