// PyTorch's own CUDA caching allocator behind three C functions, so bench/gpu/host_cost can time it side by
// side with gpumem. Built on the GPU machine against the torch wheel's headers and libraries:
//   g++ -O2 -std=c++17 -shared -fPIC c10_shim.cpp -I$TORCH/include -I$CUDA/include -L$TORCH/lib -lc10 -lc10_cuda
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

extern "C" int c10_shim_init() {
  c10::cuda::CUDACachingAllocator::init(c10::cuda::device_count());  // what torch's CUDA lazy init does
  return 0;
}
extern "C" void* c10_shim_alloc(size_t bytes) { return c10::cuda::CUDACachingAllocator::raw_alloc(bytes); }
extern "C" void c10_shim_free(void* ptr) { c10::cuda::CUDACachingAllocator::raw_delete(ptr); }
extern "C" void c10_shim_empty_cache() { c10::cuda::CUDACachingAllocator::emptyCache(); }
