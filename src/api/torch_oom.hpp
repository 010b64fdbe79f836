// PyTorch's own out-of-memory exception, thrown from gpumem_malloc without PyTorch's headers.
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

}  // namespace gpumem::api
