// Errors thrown by gpumem. OutOfMemoryError is distinct so callers can catch exactly "device full".
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace gpumem {

// Anything gpumem reports: bad arguments, misuse, backend failures.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A backend (driver, mmap, ...) call failed for a reason other than memory exhaustion.
class BackendError : public Error {
 public:
  using Error::Error;
};

// The backend could not be created: no driver, no device, missing library.
class BackendUnavailableError : public BackendError {
 public:
  using BackendError::BackendError;
};

// An allocation could not be served. The message carries the request and the allocator's state.
class OutOfMemoryError : public Error {
 public:
  struct State {
    std::size_t requested = 0;      // bytes asked for
    std::size_t allocated = 0;      // bytes held by live blocks
    std::size_t reserved = 0;       // bytes of physical memory held by the allocator
    std::size_t limit = 0;          // 0 when no limit is set
    std::size_t device_free = 0;    // what the device reports free
    std::size_t device_total = 0;
    std::size_t largest_free = 0;   // largest free extent the allocator holds
    std::size_t largest_free_here = 0;  // ... in the asking stream's own pool (others' blocks are theirs)
    int device = 0;
    std::uint64_t stream = 0;
    bool virtual_memory = false;      // the allocator maps pages and tried stitching free pages
    bool cache_released = false;      // the cache was given back and the allocation retried
    std::size_t released_bytes = 0;   // what giving back the cache returned to the device
    std::string cause;                // the backend's or the limit's own sentence, if any
  };
  OutOfMemoryError(const std::string& what, State state) : Error(what), state_(state) {}
  explicit OutOfMemoryError(const std::string& what) : Error(what) {}
  const State& state() const noexcept { return state_; }

 private:
  State state_{};
};

// Human-readable size: "1.50 GiB", "512 B".
std::string format_bytes(std::size_t bytes);

// The out-of-memory explanation (every OutOfMemoryError's message, `gpumem replay`, the PyTorch shim):
// begins as PyTorch's does ("CUDA out of memory. Tried to allocate X. GPU N has a total capacity of T of
// which F is free. ...") and then says what gpumem knows: allocated, reserved, largest free extent,
// whether stitching and giving back the cache were tried and why they could not serve.
std::string explain_out_of_memory(const OutOfMemoryError::State& state);
// A size as PyTorch's messages write it: "512 bytes", "4.00 KiB", "1048576.00 GiB".
std::string torch_format_size(std::size_t bytes);

}  // namespace gpumem
