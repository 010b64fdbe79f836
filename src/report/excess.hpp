// Where a moment's reserved but unallocated bytes sit, over an allocator snapshot (pure: data in, figures
// out; gpumem replay --peak-breakdown renders it). Memory is lent, shared and given back only in whole
// pages, so what matters is whether a free byte shares its page with a live one:
//  - free bytes in part-used pages: held until the live block beside them goes (no page to lend);
//  - whole free pages: lendable to a request of any size, given back by empty_cache();
//  - pages mapped nowhere: taken back from a range, waiting for the next growth;
//  - parts of pages given back while the rest of the page is still mapped elsewhere (waiting for it);
//  - blocks freed but still waiting for other streams (record_stream);
//  - plain segments' free bytes (no virtual memory: neither lent nor given back in part).
#pragma once
#include <cstddef>

#include "gpumem/snapshot.hpp"

namespace gpumem::report {

struct ExcessBreakdown {
  struct Pool {
    std::size_t part_page_free = 0;  // free bytes in pages that also hold live bytes
    std::size_t part_pages = 0;
    std::size_t whole_page_free = 0;  // free bytes in pages holding no live byte
    std::size_t whole_pages = 0;
  };
  std::size_t reserved = 0, allocated = 0;
  Pool small, large;                 // the small (<= 1 MiB requests) and large pools of every stream
  std::size_t mapped_nowhere = 0;    // AllocatorSnapshot::free_physical
  std::size_t parted_pages = 0;      // AllocatorSnapshot::part_page_physical
  std::size_t waiting_on_streams = 0;  // pending_free blocks
  std::size_t plain_free = 0;
  std::size_t streams = 0;  // stream pools holding memory
  std::size_t excess() const { return reserved > allocated ? reserved - allocated : 0; }
};

ExcessBreakdown explain_excess(const AllocatorSnapshot& snapshot);

}  // namespace gpumem::report
