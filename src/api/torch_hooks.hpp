// The CUDA graph pool hooks of PyTorch's CUDAPluggableAllocator (set_begin_allocate_to_pool,
// set_end_allocate_to_pool_fn, set_release_pool). PyTorch calls them through function pointers of these
// exact C++ types (torch/csrc/cuda/CUDAPluggableAllocator.h):
//   void(int device, c10::cuda::MempoolId_t id, std::function<bool(cudaStream_t)> filter)
//   void(int device, c10::cuda::MempoolId_t id)
// where MempoolId_t is std::pair<unsigned long long, unsigned long long>. They are exported from
// libgpumem.so under C names (gpumem.h cannot declare them: its users are C) and resolved by symbol.
// libstdc++'s std::function layout is part of its stable ABI, which PyTorch's Linux wheels share.
#pragma once
#include <functional>
#include <utility>

struct CUstream_st;

namespace gpumem::api {
using TorchStream = CUstream_st*;  // cudaStream_t
using TorchPoolId = std::pair<unsigned long long, unsigned long long>;
using TorchStreamFilter = std::function<bool(TorchStream)>;
}  // namespace gpumem::api

extern "C" {
void gpumem_begin_allocate_to_pool(int device, gpumem::api::TorchPoolId pool, gpumem::api::TorchStreamFilter filter);
void gpumem_end_allocate_to_pool(int device, gpumem::api::TorchPoolId pool);
void gpumem_release_pool(int device, gpumem::api::TorchPoolId pool);
}
