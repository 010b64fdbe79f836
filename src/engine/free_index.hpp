// Segregated-fit index of free blocks (as in TLSF): 64 first-level classes by power of two, each cut
// into 32 second-level classes, with bitmaps so that the next non-empty class is found in O(1).
// find() is best fit within the request's own class (a bounded scan) and otherwise takes the smallest
// of the first few blocks of the next non-empty class, every one of which fits.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>

#include "engine/block.hpp"

namespace gpumem::engine {

class FreeIndex {
 public:
  static constexpr int kSecondLevelBits = 5;
  static constexpr int kSecondLevels = 1 << kSecondLevelBits;

  void insert(Block* b) noexcept {
    auto [fl, sl] = class_of(b->size);
    Block*& head = heads_[fl][sl];
    b->free_prev = nullptr;
    b->free_next = head;
    if (head) head->free_prev = b;
    head = b;
    first_bits_ |= std::uint64_t(1) << fl;
    second_bits_[fl] |= 1u << sl;
    ++count_;
    bytes_ += b->size;
  }

  void remove(Block* b) noexcept {
    auto [fl, sl] = class_of(b->size);
    if (b->free_prev) b->free_prev->free_next = b->free_next;
    else heads_[fl][sl] = b->free_next;
    if (b->free_next) b->free_next->free_prev = b->free_prev;
    if (!heads_[fl][sl]) {
      second_bits_[fl] &= ~(1u << sl);
      if (!second_bits_[fl]) first_bits_ &= ~(std::uint64_t(1) << fl);
    }
    b->free_prev = b->free_next = nullptr;
    --count_;
    bytes_ -= b->size;
  }

  // Changes the size (and maybe the address) of an indexed block; relinks it only if its class changes.
  void resize(Block* b, DevicePtr addr, std::size_t size) noexcept {
    Class before = class_of(b->size), after = class_of(size);
    if (before.fl == after.fl && before.sl == after.sl) {
      bytes_ += size - b->size;
      b->addr = addr;
      b->size = size;
      return;
    }
    remove(b);
    b->addr = addr;
    b->size = size;
    insert(b);
  }

  // A free block of at least `size` bytes, or nullptr. The block stays in the index.
  Block* find(std::size_t size) const noexcept {
    auto [fl, sl] = class_of(size);
    if (Block* b = best_in_list(heads_[fl][sl], size, 8)) return b;
    // Any block of a higher class fits.
    std::uint32_t sl_bits = (sl + 1 < kSecondLevels) ? second_bits_[fl] & (~0u << (sl + 1)) : 0;
    if (!sl_bits) {
      std::uint64_t fl_bits = (fl + 1 < 64) ? first_bits_ & (~std::uint64_t(0) << (fl + 1)) : 0;
      if (!fl_bits) return nullptr;
      fl = std::countr_zero(fl_bits);
      sl_bits = second_bits_[fl];
    }
    sl = std::countr_zero(sl_bits);
    return best_in_list(heads_[fl][sl], 0, 4);
  }

  // Calls fn(block) for free blocks of at least `size` bytes, smallest classes first, until fn returns true.
  template <typename Fn>
  void for_each_fit(std::size_t size, Fn&& fn) const {
    auto [fl, sl] = class_of(size);
    for (;;) {
      for (std::uint32_t sl_bits = second_bits_[fl] & (~0u << sl); sl_bits; sl_bits &= sl_bits - 1)
        for (Block* b = heads_[fl][std::countr_zero(sl_bits)]; b; b = b->free_next)
          if (b->size >= size && fn(b)) return;
      const std::uint64_t fl_bits = fl + 1 < 64 ? first_bits_ & (~std::uint64_t(0) << (fl + 1)) : 0;
      if (!fl_bits) return;
      fl = std::countr_zero(fl_bits);
      sl = 0;
    }
  }

  // Calls fn(block) for free blocks of at least `min_size` bytes (and some a little smaller), largest
  // classes first, until fn returns true.
  template <typename Fn>
  void for_each_largest_first(std::size_t min_size, Fn&& fn) const {
    walk_down(first_bits_, class_of(min_size).fl, fn);
  }

  // Calls fn(block) for free blocks below `max_size` bytes (and some a little larger), largest classes
  // first, until fn returns true.
  template <typename Fn>
  void for_each_below(std::size_t max_size, Fn&& fn) const {
    const int fl_first = class_of(max_size).fl;
    const std::uint64_t below = fl_first >= 63 ? ~std::uint64_t(0) : (std::uint64_t(2) << fl_first) - 1;
    walk_down(first_bits_ & below, 0, fn);
  }

  std::size_t largest() const noexcept {
    if (!first_bits_) return 0;
    int fl = 63 - std::countl_zero(first_bits_);
    int sl = 31 - std::countl_zero(second_bits_[fl]);
    std::size_t best = 0;
    for (Block* b = heads_[fl][sl]; b; b = b->free_next) best = b->size > best ? b->size : best;
    return best;
  }

  std::size_t count() const noexcept { return count_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  // Calls fn(block) for the blocks of the first-level classes in fl_bits down to fl_min, largest classes
  // first, until fn returns true.
  template <typename Fn>
  void walk_down(std::uint64_t fl_bits, int fl_min, Fn& fn) const {
    while (fl_bits) {
      const int fl = 63 - std::countl_zero(fl_bits);
      if (fl < fl_min) return;
      fl_bits &= ~(std::uint64_t(1) << fl);
      for (std::uint32_t sl_bits = second_bits_[fl]; sl_bits;) {
        const int sl = 31 - std::countl_zero(sl_bits);
        sl_bits &= ~(1u << sl);
        for (Block* b = heads_[fl][sl]; b; b = b->free_next)
          if (fn(b)) return;
      }
    }
  }

  struct Class {
    int fl, sl;
  };
  static Class class_of(std::size_t size) noexcept {
    if (size < kSecondLevels) return {0, int(size)};
    int fl = std::bit_width(size) - 1;
    int sl = int((size >> (fl - kSecondLevelBits)) & (kSecondLevels - 1));
    return {fl, sl};
  }
  static Block* best_in_list(Block* head, std::size_t size, int max_scan) noexcept {
    Block* best = nullptr;
    for (Block* b = head; b && max_scan > 0; b = b->free_next, --max_scan) {
      if (b->size < size) continue;
      if (!best || b->size < best->size || (b->size == best->size && b->addr < best->addr)) best = b;
      if (b->size == size) break;
    }
    return best;
  }

  Block* heads_[64][kSecondLevels] = {};
  std::uint32_t second_bits_[64] = {};
  std::uint64_t first_bits_ = 0;
  std::size_t count_ = 0;
  std::size_t bytes_ = 0;
};

}  // namespace gpumem::engine
