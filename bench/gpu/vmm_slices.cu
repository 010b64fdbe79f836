// Whether granules cut from one large physical handle cost less to map and make accessible than granules
// that are handles of their own (issue 7 item 3: driver calls per page). cuMemMap takes an offset into a
// handle, so one cuMemCreate could back many 2 MiB mappings anywhere; this probe says what each way costs.
// Ways, each over `n` granules (default 64, 128 MiB), medians of 5 rounds, us per granule:
//   own      n handles of 2 MiB, mapped side by side, access set over the run in one call (the engine today)
//   slices   one handle of n granules, each granule mapped by its own cuMemMap side by side, access in one call
//   scatter  one handle, each granule mapped at every other granule of a range in shuffled order, access
//            set granule by granule (stitched pages land like this)
//   whole    one handle, one cuMemMap and one access call (what a large page costs)
// Each row: create (per granule, the one handle's create spread over n), map, access, unmap, release.
// A driver that maps a handle only whole refuses the slice ways with CUDA_ERROR_NOT_SUPPORTED (801; so
// did 580.159 on an H200, even a first granule at offset 0): that is reported as the finding, not a failure.
// Usage: vmm_slices [--granules N]   Exit: 0 every call succeeded or was refused as unsupported, 1 a driver
// call failed otherwise, 4 no driver/GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backends/cuda_driver.hpp"
#include "gpumem/errors.hpp"

namespace {
using namespace gpumem::cuda;
using Clock = std::chrono::steady_clock;
constexpr std::size_t kGranule = std::size_t(2) << 20;

enum Way { kOwn, kSlices, kScatter, kWhole, kWays };
const char* const kWayNames[kWays] = {"own", "slices", "scatter", "whole"};
enum Part { kCreate, kMap, kAccess, kUnmap, kRelease, kParts };

double us_per(Clock::time_point t0, std::size_t n) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(n);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Probe {
  const Driver& d;
  CUmemAllocationProp prop{};
  CUmemAccessDesc access{};
  CUdeviceptr va = 0;  // 2n granules reserved, one granule in
  std::size_t n = 0;
  std::vector<std::size_t> order;  // scatter: which slot each granule goes to

  CUresult refused = CUDA_SUCCESS;  // the cuMemMap result that stopped the last round

  // One round of `way`; adds a sample per part. False when a driver call fails.
  bool round(Way way, std::vector<double> (&s)[kParts]) {
    refused = CUDA_SUCCESS;
    std::vector<CUmemGenericAllocationHandle> h(way == kOwn ? n : 1);
    auto at = [&](std::size_t i) { return va + (way == kScatter ? 2 * order[i] : i) * kGranule; };
    auto t0 = Clock::now();
    for (auto& handle : h)
      if (d.cuMemCreate(&handle, way == kOwn ? kGranule : n * kGranule, &prop, 0) != CUDA_SUCCESS) return false;
    s[kCreate].push_back(us_per(t0, n));
    t0 = Clock::now();
    if (way == kWhole) {
      if (d.cuMemMap(va, n * kGranule, 0, h[0], 0) != CUDA_SUCCESS) return false;
    } else {
      for (std::size_t i = 0; i < n; ++i)
        if (CUresult r = d.cuMemMap(at(i), kGranule, way == kOwn ? 0 : i * kGranule, h[way == kOwn ? i : 0], 0);
            r != CUDA_SUCCESS) {
          refused = r;
          for (std::size_t j = 0; j < i; ++j) d.cuMemUnmap(at(j), kGranule);
          for (auto handle : h) d.cuMemRelease(handle);
          return false;
        }
    }
    s[kMap].push_back(us_per(t0, n));
    t0 = Clock::now();
    if (way == kScatter) {
      for (std::size_t i = 0; i < n; ++i)
        if (d.cuMemSetAccess(at(i), kGranule, &access, 1) != CUDA_SUCCESS) return false;
    } else if (d.cuMemSetAccess(va, n * kGranule, &access, 1) != CUDA_SUCCESS) {
      return false;
    }
    s[kAccess].push_back(us_per(t0, n));
    t0 = Clock::now();
    if (way == kWhole) {
      if (d.cuMemUnmap(va, n * kGranule) != CUDA_SUCCESS) return false;
    } else {
      for (std::size_t i = 0; i < n; ++i)
        if (d.cuMemUnmap(at(i), kGranule) != CUDA_SUCCESS) return false;
    }
    s[kUnmap].push_back(us_per(t0, n));
    t0 = Clock::now();
    for (auto handle : h)
      if (d.cuMemRelease(handle) != CUDA_SUCCESS) return false;
    s[kRelease].push_back(us_per(t0, n));
    return true;
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 64;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--granules") && i + 1 < argc) {
      n = std::strtoul(argv[++i], nullptr, 10);
      if (n < 1 || n > 2048) return std::fprintf(stderr, "vmm_slices: --granules takes 1..2048\n"), 2;
    } else {
      return std::fprintf(stderr, "usage: vmm_slices [--granules N]\n"), 2;
    }
  }
  const Driver* d = nullptr;
  try {
    d = &driver();
  } catch (const gpumem::Error& e) {
    return std::fprintf(stderr, "vmm_slices: %s\n", e.what()), 4;
  }
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (d->cuDeviceGet(&dev, 0) != CUDA_SUCCESS || d->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
    return std::fprintf(stderr, "vmm_slices: no usable CUDA device 0\n"), 4;
  d->cuCtxSetCurrent(ctx);
  Probe p{*d};
  p.n = n;
  p.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  p.access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  p.order.resize(n);
  std::iota(p.order.begin(), p.order.end(), std::size_t(0));
  std::shuffle(p.order.begin(), p.order.end(), std::mt19937(7));
  CUdeviceptr base = 0;
  if (d->cuMemAddressReserve(&base, (2 * n + 1) * kGranule, kGranule, 0, 0) != CUDA_SUCCESS)
    return std::printf("FAIL vmm_slices: no address range\n"), 1;
  p.va = base + kGranule;
  std::printf("%-8s %8s %8s %8s %8s %8s %10s  (us per 2 MiB granule, %zu granules, medians of 5)\n", "way", "create",
              "map", "access", "unmap", "release", "total", n);
  int failures = 0;
  for (int w = 0; w < kWays; ++w) {
    std::vector<double> s[kParts];
    bool ok = p.round(Way(w), s);  // warm-up
    for (auto& v : s) v.clear();
    for (int r = 0; ok && r < 5; ++r) ok = p.round(Way(w), s);
    if (!ok && p.refused == CUDA_ERROR_NOT_SUPPORTED && (w == kSlices || w == kScatter)) {
      std::printf("%-8s refused: cuMemMap of a granule of a %zu MiB handle returned CUDA_ERROR_NOT_SUPPORTED (a handle maps only whole)\n",
                  kWayNames[w], 2 * n);
      continue;
    }
    if (!ok) {
      std::printf("FAIL vmm_slices %s: a driver call failed\n", kWayNames[w]);
      ++failures;
      continue;
    }
    double total = 0;
    for (auto& v : s) total += median(v);
    std::printf("%-8s %8.2f %8.2f %8.2f %8.2f %8.2f %10.2f\n", kWayNames[w], median(s[kCreate]), median(s[kMap]),
                median(s[kAccess]), median(s[kUnmap]), median(s[kRelease]), total);
  }
  d->cuMemAddressFree(base, (2 * n + 1) * kGranule);
  d->cuDevicePrimaryCtxRelease(dev);
  return failures ? 1 : 0;
}
