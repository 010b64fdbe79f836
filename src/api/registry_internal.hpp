// Lookups on the default allocators that never create one (for the C ABI's free and record_stream paths).
#pragma once
#include <functional>

#include "gpumem/allocator.hpp"

namespace gpumem {

// The default allocator of `device` (-1: current) if it exists, else nullptr.
Allocator* find_default_allocator(int device) noexcept;
// The default allocator that handed out the block starting at ptr, else nullptr.
Allocator* owner_of(const void* ptr) noexcept;
// Calls fn for every default allocator made so far.
void for_each_default_allocator(const std::function<void(Allocator&)>& fn);

}  // namespace gpumem
