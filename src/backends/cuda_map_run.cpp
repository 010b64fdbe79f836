#include "backends/cuda_map_run.hpp"

#include "backends/call_timer.hpp"

namespace gpumem::cuda {

void map_pages_with_access(DevicePtr va, const std::vector<SizedPage>& pages, const std::vector<char>& ready,
                           const std::vector<CUmemAccessDesc>& accesses, BackendCallCounts& counts) {
  const Driver& d = driver();
  std::size_t mapped = 0, mapped_bytes = 0;
  CUresult r = CUDA_SUCCESS;
  {
    Timed timed(counts.map_ns);
    while (mapped < pages.size()) {
      const auto [handle, size] = pages[mapped];
      if (!ready[mapped]) {
        r = d.cuMemMap(CUdeviceptr(va + mapped_bytes), size, 0, handle, 0);
        ++counts.driver_maps;
        if (r != CUDA_SUCCESS) break;
      }
      ++mapped;
      mapped_bytes += size;
    }
  }
  const char* failed = "cuMemMap";
  // Access once per stretch of pages mapped here (the pages made ahead have theirs).
  for (std::size_t i = 0, at = 0; r == CUDA_SUCCESS && i < mapped;) {
    std::size_t end = i, bytes = 0;
    while (end < mapped && !ready[end]) bytes += pages[end++].second;
    if (bytes) {
      Timed timed(counts.access_ns);
      r = d.cuMemSetAccess(CUdeviceptr(va + at), bytes, accesses.data(), accesses.size());
      failed = "cuMemSetAccess";
      ++counts.access_sets;
    }
    at += bytes;
    for (; end < mapped && ready[end]; ++end) at += pages[end].second;
    i = end;
  }
  if (r == CUDA_SUCCESS) return;
  for (std::size_t i = 0, at = 0; i < mapped; at += pages[i].second, ++i)
    if (!ready[i]) {
      d.cuMemUnmap(CUdeviceptr(va + at), pages[i].second);
      ++counts.driver_unmaps;
    }
  check(r, failed);  // pages made ahead stay where they were
}

}  // namespace gpumem::cuda
