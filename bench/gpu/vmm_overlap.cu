// Whether CUDA virtual-memory calls made on one thread slow down kernel launches on another (run by
// scripts/gpu-check.sh, step 3b): the question behind mapping pages ahead of need off the allocating
// thread. A launcher thread issues `launches` empty kernels on its stream; a mapper thread cycles
// 2 MiB pages through cuMemCreate + cuMemMap + cuMemSetAccess (16 pages per run, as the engine's growth
// does) + cuMemUnmap + cuMemRelease. Timed alone and together, 3 rounds each, medians:
//   launch  us per launch, alone / with the mapper running
//   mapper  us per page, alone / with the launcher running
//   inline  us per launch when the launching thread itself maps a page every `every` launches, the
//           mapping cost included (what the program pays today), for comparison.
// Usage: vmm_overlap [--json FILE]   Exit: 0 measured, 1 a driver call failed, 4 no driver/GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "backends/cuda_driver.hpp"
#include "gpumem/errors.hpp"

namespace {
using namespace gpumem::cuda;
using Clock = std::chrono::steady_clock;
constexpr std::size_t kPage = 2u << 20, kRun = 16;
constexpr int kLaunches = 100000, kEvery = 25;

__global__ void nothing() {}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Mapper {
  const Driver& d;
  CUmemAllocationProp prop{};
  CUmemAccessDesc access{};
  CUdeviceptr va = 0;
  std::atomic<bool> failed{false};

  // One run of kRun pages created, mapped, made accessible, unmapped and released.
  void cycle() {
    CUmemGenericAllocationHandle h[kRun];
    bool ok = true;
    for (std::size_t i = 0; i < kRun; ++i) ok = ok && d.cuMemCreate(&h[i], kPage, &prop, 0) == CUDA_SUCCESS;
    for (std::size_t i = 0; ok && i < kRun; ++i) ok = d.cuMemMap(va + i * kPage, kPage, 0, h[i], 0) == CUDA_SUCCESS;
    ok = ok && d.cuMemSetAccess(va, kRun * kPage, &access, 1) == CUDA_SUCCESS;
    for (std::size_t i = 0; ok && i < kRun; ++i) ok = d.cuMemUnmap(va + i * kPage, kPage) == CUDA_SUCCESS;
    for (std::size_t i = 0; ok && i < kRun; ++i) ok = d.cuMemRelease(h[i]) == CUDA_SUCCESS;
    if (!ok) failed = true;
  }
  // Cycles until `stop`; returns us per page.
  double until(const std::atomic<bool>& stop) {
    std::size_t pages = 0;
    const auto t0 = Clock::now();
    while (!stop && !failed) {
      cycle();
      pages += kRun;
    }
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(std::max<std::size_t>(pages, 1));
  }
};

// us per launch for kLaunches launches (synchronized at the end); with `mapper`, one page cycle's
// share (a run every kRun*kEvery launches) on this same thread.
double launches(cudaStream_t s, Mapper* inline_mapper) {
  const auto t0 = Clock::now();
  for (int i = 0; i < kLaunches; ++i) {
    nothing<<<1, 32, 0, s>>>();
    if (inline_mapper && i % int(kRun * kEvery) == 0) inline_mapper->cycle();
  }
  cudaStreamSynchronize(s);
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kLaunches;
}

}  // namespace

int main(int argc, char** argv) {
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: vmm_overlap [--json FILE]\n");
      return 2;
    }
  }
  const Driver* d = nullptr;
  try {
    d = &driver();
  } catch (const gpumem::Error& e) {
    std::fprintf(stderr, "vmm_overlap: %s\n", e.what());
    return 4;
  }
  if (cudaFree(nullptr) != cudaSuccess) {  // the runtime's primary context, shared with the driver calls
    std::fprintf(stderr, "vmm_overlap: no usable CUDA device\n");
    return 4;
  }
  Mapper m{*d};
  m.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  m.prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  m.access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (d->cuMemAddressReserve(&m.va, kRun * kPage, kPage, 0, 0) != CUDA_SUCCESS) {
    std::fprintf(stderr, "vmm_overlap: cuMemAddressReserve failed\n");
    return 1;
  }
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  launches(s, nullptr);  // warm-up: module load, the first launches
  m.cycle();
  std::vector<double> alone, together, map_alone, map_together, inline_cost;
  for (int r = 0; r < 3 && !m.failed; ++r) {
    alone.push_back(launches(s, nullptr));
    std::atomic<bool> stop{false};
    double per_page = 0;
    std::thread mapper([&] { per_page = m.until(stop); });
    together.push_back(launches(s, nullptr));
    stop = true;
    mapper.join();
    map_together.push_back(per_page);
    std::atomic<bool> stop_alone{false};
    std::thread timer([&] {
      std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(alone.back() * kLaunches));
      stop_alone = true;
    });
    map_alone.push_back(m.until(stop_alone));
    timer.join();
    inline_cost.push_back(launches(s, &m));
  }
  if (m.failed) {
    std::printf("FAIL vmm_overlap: a driver call failed\n");
    return 1;
  }
  const double la = median(alone), lt = median(together), ma = median(map_alone), mt = median(map_together),
               li = median(inline_cost);
  std::printf("launch us: alone %.3f, with a mapper thread %.3f (x%.3f); mapping the same thread %.3f (x%.3f)\n", la, lt,
              lt / la, li, li / la);
  std::printf("mapper us per 2 MiB page: alone %.2f, while launching %.2f (x%.3f)\n", ma, mt, mt / ma);
  std::printf("PASS vmm_overlap: launches x%.3f while another thread maps\n", lt / la);
  if (json) {
    if (FILE* out = std::fopen(json, "w")) {
      std::fprintf(out,
                   "{\"launch_us\": %.4f, \"launch_with_mapper_us\": %.4f, \"launch_inline_map_us\": %.4f, "
                   "\"map_page_us\": %.3f, \"map_page_while_launching_us\": %.3f}\n",
                   la, lt, li, ma, mt);
      std::fclose(out);
    }
  }
  cudaStreamDestroy(s);
  d->cuMemAddressFree(m.va, kRun * kPage);
  return 0;
}
