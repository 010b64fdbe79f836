// A hook the C ABI calls on the allocating thread before gpumem_malloc / gpumem_allocate, outside every
// allocator lock: memory history (src/report) uses it to capture the caller's stack, which it then
// attaches to the allocation's event. Unset, it costs one relaxed load.
#pragma once
#include <atomic>

namespace gpumem::api {

using ContextHook = void (*)();
inline std::atomic<ContextHook> context_hook{nullptr};

inline void run_context_hook() noexcept {
  if (ContextHook hook = context_hook.load(std::memory_order_relaxed)) hook();
}

}  // namespace gpumem::api
