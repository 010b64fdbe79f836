// Process-wide default allocators, one per device, with torch.cuda's names.
// `device` -1 means the current device (0 unless set_current_device was called on this thread).
// The backend of the default allocators comes from GPUMEM_BACKEND (cuda | cuda-plain | host | sim;
// default cuda) or from set_backend_factory() before first use.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "gpumem/allocator.hpp"

namespace gpumem {

inline constexpr int kMaxDevices = 64;  // devices 0 .. kMaxDevices - 1 have default allocators

using BackendFactory = std::function<std::shared_ptr<Backend>(int device)>;
void set_backend_factory(BackendFactory factory);  // before the first default allocator is made
Allocator& default_allocator(int device = -1);
void set_current_device(int device);
int current_device();

std::size_t memory_allocated(int device = -1);
std::size_t memory_reserved(int device = -1);
std::size_t max_memory_allocated(int device = -1);
std::size_t max_memory_reserved(int device = -1);
void reset_peak_memory_stats(int device = -1);
void empty_cache();  // every device that has an allocator
void set_per_process_memory_fraction(double fraction, int device = -1);
std::map<std::string, std::int64_t> memory_stats(int device = -1);
std::string memory_summary(int device = -1, bool abbreviated = false);

}  // namespace gpumem
