// Fills an AllocatorSnapshot from a stream pool (its lock held by the caller).
#pragma once
#include "engine/stream_pool.hpp"
#include "gpumem/snapshot.hpp"

namespace gpumem::engine {

void describe_pool(const StreamPool& pool, AllocatorSnapshot& out);
// Regions and mappings in address order.
void sort_snapshot(AllocatorSnapshot& snap);

}  // namespace gpumem::engine
