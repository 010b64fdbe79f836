// What gpumem does inside PyTorch's C++ without its headers: throw its own out-of-memory exception from
// gpumem_malloc, and answer cacheInfo() for cuDNN.
//
// Contract: throw_torch_out_of_memory(message) never returns. When the process has PyTorch's libc10 loaded
// (found through dlsym, by name), it throws a genuine c10::OutOfMemoryError carrying `message`, which
// PyTorch's Python bindings turn into torch.OutOfMemoryError (= torch.cuda.OutOfMemoryError). When any
// needed symbol is missing (no PyTorch, or a libc10 built differently) it returns false from
// c10_out_of_memory_available() and throw_torch_out_of_memory() throws gpumem::OutOfMemoryError instead
// (PyTorch turns that into a RuntimeError). Either way the exception derives from std::exception.
#pragma once
#include <string>

#include "gpumem/errors.hpp"

namespace gpumem::api {

// True when libc10's constructor, vtable and typeinfo for c10::OutOfMemoryError are all loaded.
bool c10_out_of_memory_available() noexcept;

// Throws c10::OutOfMemoryError(message) if available, else rethrows `fallback`.
[[noreturn]] void throw_torch_out_of_memory(const OutOfMemoryError& fallback);

// Points PyTorch's CUDAPluggableAllocator::cacheInfo at gpumem_cache_info (torch_cache_info.cpp); true when
// done now or before, false when the method or its vtable slot is not found (then nothing changed).
bool enable_torch_cache_info() noexcept;

}  // namespace gpumem::api
