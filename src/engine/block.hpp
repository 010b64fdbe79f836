// Blocks: contiguous address ranges of one arena region, kept in address order so neighbours coalesce
// in O(1). A block is free (in the free index), allocated (handed out), pending (freed by the program,
// waiting for other streams' events), parked (just freed, not yet coalesced: see StreamPool), a hole
// (virtual addresses whose physical pages were taken away) or shared (the bytes of a mapped page that
// a block at another address of the same page uses: see Arena's share_plan).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumem/backend.hpp"

namespace gpumem::engine {

enum class BlockState : std::uint8_t { free, allocated, pending, parked, hole, shared };

struct Region;

struct Block {
  DevicePtr addr = 0;
  std::size_t size = 0;
  Block* prev = nullptr;  // address-ordered neighbours inside the region
  Block* next = nullptr;
  Block* free_prev = nullptr;  // links in the free index's size-class list
  Block* free_next = nullptr;
  Region* region = nullptr;
  std::size_t requested = 0;  // what the program asked for (allocated / pending); shared: the other
                              // address's page start
  BlockState state = BlockState::free;
  bool small = false;          // accounted to the small pool (request <= 1 MiB)
  std::vector<StreamId>* other_streams = nullptr;  // streams given by record_stream; usually none

  DevicePtr end() const { return addr + size; }
};

// Recycles Block records: allocation of the records themselves stays off the heap on the hot path.
class BlockRecycler {
 public:
  BlockRecycler() = default;
  BlockRecycler(const BlockRecycler&) = delete;
  BlockRecycler& operator=(const BlockRecycler&) = delete;
  ~BlockRecycler() {
    for (Block* slab : slabs_) delete[] slab;
  }

  Block* make() {
    if (!spare_) refill();
    Block* b = spare_;
    spare_ = b->next;
    *b = Block{};
    return b;
  }
  // At least two records at hand, so the next two make() calls cannot throw; false if memory ran out.
  bool ensure_spare() noexcept {
    try {
      if (!spare_ || !spare_->next) refill();
      return true;
    } catch (...) {
      return false;
    }
  }
  void recycle(Block* b) noexcept {
    delete b->other_streams;
    b->other_streams = nullptr;
    b->next = spare_;
    spare_ = b;
  }

 private:
  void refill() {
    constexpr std::size_t kSlab = 256;
    Block* slab = new Block[kSlab];
    slabs_.push_back(slab);
    for (std::size_t i = 0; i < kSlab; ++i) {
      slab[i].next = spare_;
      spare_ = &slab[i];
    }
  }
  Block* spare_ = nullptr;
  std::vector<Block*> slabs_;
};

}  // namespace gpumem::engine
