// Lookups on the default allocators that never create one (for the C ABI's free and record_stream paths).
#pragma once
#include <functional>
#include <memory>

#include "gpumem/allocator.hpp"

namespace gpumem {

// The default allocator of `device` (-1: current) if it exists, else nullptr.
Allocator* find_default_allocator(int device) noexcept;
// The default allocator that handed out the block starting at ptr, else nullptr.
Allocator* owner_of(const void* ptr) noexcept;
// Calls fn for every default allocator made so far.
void for_each_default_allocator(const std::function<void(Allocator&)>& fn);
// The same with each one's device index (the registry's, as the control server reports it).
void for_each_default_allocator_at(const std::function<void(int, Allocator&)>& fn);
// fn(device, allocator) for every default allocator made from now on, before any other thread can use it:
// for observers that must see all of its events (the memory history, for a device first used after it
// started).
void on_new_default_allocator(std::function<void(int, Allocator&)> fn);
// The live block of any default allocator holding ptr (at its start or inside): start and usable bytes;
// {nullptr, 0} if none.
std::pair<void*, std::size_t> live_block_containing(const void* ptr) noexcept;
// A new backend for `device` made as the default allocators' are (factory or GPUMEM_BACKEND), for
// memory that is not the allocator's own (CUDA IPC imports).
std::shared_ptr<Backend> make_backend(int device);

}  // namespace gpumem
