// Do the CUDA virtual-memory driver calls scale over threads? A growth of n pages costs ~50 us per page
// on one thread (bench/gpu/vmm_cost.cu), whatever the page size: if the driver lets several threads
// create, map and grant access at once, a large growth could be split over a few threads and finish in
// a fraction of the time. For 1, 2, 4 and 8 threads: 512 pages of 2 MiB (1 GiB), each thread creating,
// mapping and granting access (one cuMemSetAccess over its slice) on a disjoint slice of one reserved
// range, wall time from a common start; then the same for unmap + release; then access alone (pages
// created and mapped by one thread, access granted by T threads over their slices). Median of 5 rounds,
// microseconds per page of wall time, and the speed-up over one thread.
// Usage: vmm_threads [--json FILE]   Exit: 0 every call succeeded, 1 a driver call failed, 4 no driver/GPU.
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
constexpr std::size_t kPage = std::size_t(2) << 20, kPages = 512;

struct Shared {
  const Driver* d;
  CUcontext ctx;
  CUmemAllocationProp prop{};
  CUmemAccessDesc access{};
  CUdeviceptr va = 0;
  std::vector<CUmemGenericAllocationHandle> handles = std::vector<CUmemGenericAllocationHandle>(kPages);
  std::atomic<bool> failed{false};
};

enum class Phase { create_map_access, access_only, unmap_release };

// Runs `phase` over [first, last) pages of the range on this thread.
void slice(Shared& s, Phase phase, std::size_t first, std::size_t last) {
  const Driver& d = *s.d;
  d.cuCtxSetCurrent(s.ctx);
  bool ok = true;
  if (phase == Phase::create_map_access) {
    for (std::size_t i = first; ok && i < last; ++i)
      ok = d.cuMemCreate(&s.handles[i], kPage, &s.prop, 0) == CUDA_SUCCESS &&
           d.cuMemMap(s.va + i * kPage, kPage, 0, s.handles[i], 0) == CUDA_SUCCESS;
  }
  if (ok && phase != Phase::unmap_release)
    ok = d.cuMemSetAccess(s.va + first * kPage, (last - first) * kPage, &s.access, 1) == CUDA_SUCCESS;
  if (phase == Phase::unmap_release)
    for (std::size_t i = first; ok && i < last; ++i)
      ok = d.cuMemUnmap(s.va + i * kPage, kPage) == CUDA_SUCCESS && d.cuMemRelease(s.handles[i]) == CUDA_SUCCESS;
  if (!ok) s.failed = true;
}

// Wall time of `phase` over all pages split over `threads` threads, in microseconds per page.
double timed(Shared& s, Phase phase, int threads) {
  std::vector<std::thread> pool;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ++ready;
      while (!go.load()) {
      }
      slice(s, phase, kPages * t / threads, kPages * (t + 1) / threads);
    });
  while (ready.load() < threads) {
  }
  const auto t0 = Clock::now();
  go = true;
  for (auto& th : pool) th.join();
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(kPages);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json = argv[++i];
    } else {
      std::fprintf(stderr, "usage: vmm_threads [--json FILE]\n");
      return 2;
    }
  }
  Shared s;
  try {
    s.d = &driver();
  } catch (const gpumem::Error& e) {
    std::fprintf(stderr, "vmm_threads: %s\n", e.what());
    return 4;
  }
  const Driver& d = *s.d;
  CUdevice dev = 0;
  if (d.cuDeviceGet(&dev, 0) != CUDA_SUCCESS || d.cuDevicePrimaryCtxRetain(&s.ctx, dev) != CUDA_SUCCESS) {
    std::fprintf(stderr, "vmm_threads: no usable CUDA device 0\n");
    return 4;
  }
  d.cuCtxSetCurrent(s.ctx);
  s.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  s.prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  s.access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (d.cuMemAddressReserve(&s.va, kPages * kPage, kPage, 0, 0) != CUDA_SUCCESS) {
    std::fprintf(stderr, "vmm_threads: cannot reserve 1 GiB of addresses\n");
    return 1;
  }
  const int counts[] = {1, 2, 4, 8};
  struct Row {
    int threads;
    double build, access, teardown;
  };
  std::vector<Row> rows;
  std::printf("%8s %22s %16s %18s   (2 MiB pages, 512 of them; us of wall time per page)\n", "threads",
              "create+map+access", "access alone", "unmap+release");
  for (int round = -1; round < 5 && !s.failed; ++round) {  // round -1 warms up
    for (int threads : counts) {
      const double build = timed(s, Phase::create_map_access, threads);
      const double teardown = timed(s, Phase::unmap_release, threads);
      // Access alone: one thread creates and maps, T threads grant access.
      bool ok = true;
      for (std::size_t i = 0; ok && i < kPages; ++i)
        ok = d.cuMemCreate(&s.handles[i], kPage, &s.prop, 0) == CUDA_SUCCESS &&
             d.cuMemMap(s.va + i * kPage, kPage, 0, s.handles[i], 0) == CUDA_SUCCESS;
      if (!ok) s.failed = true;
      const double access = ok ? timed(s, Phase::access_only, threads) : 0;
      if (ok) timed(s, Phase::unmap_release, 1);
      if (round >= 0) rows.push_back({threads, build, access, teardown});
    }
  }
  d.cuMemAddressFree(s.va, kPages * kPage);
  if (s.failed) {
    std::printf("FAIL vmm_threads: a driver call failed\n");
    return 1;
  }
  FILE* out = json ? std::fopen(json, "w") : nullptr;
  if (out) std::fprintf(out, "[");
  double one[3] = {0, 0, 0};
  for (int threads : counts) {
    std::vector<double> b, a, t;
    for (const Row& r : rows)
      if (r.threads == threads) b.push_back(r.build), a.push_back(r.access), t.push_back(r.teardown);
    const double mb = median(b), ma = median(a), mt = median(t);
    if (threads == 1) one[0] = mb, one[1] = ma, one[2] = mt;
    std::printf("%8d %13.2f (%5.2fx) %8.2f (%5.2fx) %10.2f (%5.2fx)\n", threads, mb, one[0] / mb, ma, one[1] / ma, mt,
                one[2] / mt);
    if (out)
      std::fprintf(out, "%s{\"threads\": %d, \"create_map_access_us\": %.3f, \"access_us\": %.3f, \"unmap_release_us\": %.3f}",
                   threads == 1 ? "" : ", ", threads, mb, ma, mt);
  }
  if (out) {
    std::fprintf(out, "]\n");
    std::fclose(out);
  }
  std::printf("PASS vmm_threads\n");
  d.cuDevicePrimaryCtxRelease(dev);
  return 0;
}
