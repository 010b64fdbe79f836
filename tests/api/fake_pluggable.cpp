// A stand-in for libtorch_cuda's CUDAPluggableAllocator: same namespace, class and method name, and a
// cacheInfo that refuses as PyTorch's does, called through the vtable from inside this library.
#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace torch::cuda::CUDAPluggableAllocator {
struct CUDAPluggableAllocator {
  virtual ~CUDAPluggableAllocator();
  virtual void cacheInfo(std::int8_t device, std::size_t* largest_block);
};
CUDAPluggableAllocator::~CUDAPluggableAllocator() = default;
void CUDAPluggableAllocator::cacheInfo(std::int8_t, std::size_t*) {
  throw std::runtime_error("CUDAPluggableAllocator does not yet support cacheInfo");
}
}  // namespace torch::cuda::CUDAPluggableAllocator

using Pluggable = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
extern "C" void* fake_pluggable_make() {
  static Pluggable allocator;  // one per process, as PyTorch's current allocator is
  return &allocator;
}
// What cuDNN's getMaxWorkspaceSize does: a virtual call on the current allocator.
extern "C" std::size_t fake_pluggable_cache_info(void* allocator, std::int8_t device) {
  std::size_t largest = 0;
  static_cast<Pluggable*>(allocator)->cacheInfo(device, &largest);
  return largest;
}
