// CUDA backends: real GPU memory through the CUDA driver API, loaded at run time (no link-time CUDA).
//
//  - "cuda": virtual memory management (cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemSetAccess):
//    the engine's page packing and stitching on real memory. Drivers refuse cuMemMap at a nonzero offset into an allocation, so a chunk
//    is one physical allocation per granule and a mapping maps granule by granule (as PyTorch's
//    expandable segments do with their pages). Pages are `page_bytes` (0: 16 MiB), rounded up to the driver's
//    granularity: bigger pages, fewer driver calls per byte; smaller pages, finer stitching and release
//    (the default allocators take GPUMEM_CUDA_PAGE_MIB, else 2 MiB under a limit, see registry.cpp).
//  - "cuda-plain": cuMemAlloc / cuMemFree only, for drivers or setups without VMM.
// Both work in the device's primary context (the one the CUDA runtime and PyTorch use) and make it current
// only for the calls that need one, restoring the caller's context after. Events come from a pool
// (timing disabled). Without a driver or device, creation throws BackendUnavailableError with one sentence.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "gpumem/backend.hpp"

namespace gpumem {

enum class CudaMemoryMode { virtual_memory, plain };

// Throws BackendUnavailableError when the driver, the device, or (for virtual_memory) VMM support is missing.
std::shared_ptr<Backend> make_cuda_backend(int device, CudaMemoryMode mode = CudaMemoryMode::virtual_memory,
                                           std::size_t page_bytes = 0);

// Number of CUDA devices; throws BackendUnavailableError without a driver.
int cuda_device_count();

// Empty when the driver loads and initialises; otherwise the sentence creation would throw.
std::string cuda_unavailable_reason();

// Synchronous copies between host memory and device memory of a CUDA backend (tests, checks).
void cuda_copy_to_device(Backend& backend, DevicePtr dst, const void* src, std::size_t bytes);
void cuda_copy_to_host(Backend& backend, void* dst, DevicePtr src, std::size_t bytes);

}  // namespace gpumem
