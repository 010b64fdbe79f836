// The one out-of-memory explanation (errors.hpp). PyTorch's first sentences, so people and tools that
// know PyTorch's message read it unchanged, then what only gpumem knows.
#include <cstdio>
#include <string>

#include "gpumem/errors.hpp"

namespace gpumem {

std::string torch_format_size(std::size_t bytes) {
  // PyTorch's format_size: bytes below 1 KiB, then KiB, MiB and GiB (never a larger unit).
  char buf[48];
  if (bytes <= 1024) {
    std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  } else if (bytes <= 1048576) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", double(bytes) / 1024.0);
  } else if (bytes <= 1073741824) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / 1048576.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / 1073741824.0);
  }
  return buf;
}

std::string explain_out_of_memory(const OutOfMemoryError::State& s) {
  const std::size_t cached = s.reserved > s.allocated ? s.reserved - s.allocated : 0;
  std::string m = "CUDA out of memory. Tried to allocate " + torch_format_size(s.requested) + ". GPU " +
                  std::to_string(s.device) + " has a total capacity of " + torch_format_size(s.device_total) +
                  " of which " + torch_format_size(s.device_free) + " is free. This process has " +
                  torch_format_size(s.reserved) + " reserved by gpumem. Of the allocated memory " +
                  torch_format_size(s.allocated) + " is allocated by gpumem, ";
  if (s.limit) m += "with " + torch_format_size(s.limit) + " allowed; ";
  m += "and " + torch_format_size(cached) + " is reserved by gpumem but unallocated. ";
  // What gpumem knows beyond PyTorch's figures.
  m += "gpumem: " + format_bytes(s.requested) + " requested on stream " + std::to_string(s.stream) +
       ", largest free extent " + torch_format_size(s.largest_free_here) + " in its pool";
  // A larger one in another stream's pool (or a graph's) is not this request's: blocks there serve only
  // their own stream, as in PyTorch; only whole free pages move between pools.
  if (s.largest_free > s.largest_free_here)
    m += " (" + torch_format_size(s.largest_free) + " in another stream's or a graph's pool)";
  // What ran short: the room under the limit when one is set and the device had the bytes, else the device.
  const bool limit_binds = s.limit && s.device_free >= s.requested;
  if (s.virtual_memory)
    m += std::string("; stitching free pages into one block was tried, but free pages and ") +
         (limit_binds ? "the room left under the limit" : "the device's free memory") + " together are less than the request";
  if (s.cache_released)
    m += "; giving back the cache (" + torch_format_size(s.released_bytes) + ") and retrying did not help";
  if (s.limit && s.requested > s.limit) m += "; the request alone is larger than the limit";
  else if (s.limit && s.allocated + s.requested > s.limit) m += "; live allocations plus the request exceed the limit";
  else if (s.requested > s.device_total) m += "; the request is larger than the device";
  if (!s.cause.empty()) m += " (" + s.cause + ")";
  m += ".";
  return m;
}

}  // namespace gpumem
