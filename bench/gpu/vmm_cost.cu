// What each CUDA virtual-memory driver call costs on this GPU (run by scripts/gpu-check.sh), to choose
// the page size and the batching of the CUDA backend: cuMemCreate, cuMemMap, cuMemSetAccess (one call
// per page, and one call over a whole run of pages, each on mappings whose access was never set: a call on
// pages already accessible is cheap and says nothing), cuMemUnmap (per page, and one call over a run of
// separately mapped pages, which tells whether the driver allows it) and cuMemRelease, at 2 MiB and
// 16 MiB pages; then create + map + access over a run again while a ~20 ms kernel runs on another stream
// ("busy"), and whether that kernel was still running when the calls returned (they did not wait for it).
// Each figure is the median of 5 rounds of `pages` calls, in microseconds per call (per page for a run).
// Prints one PASS/FAIL line per page size; with --json FILE also writes the figures.
// Usage: vmm_cost [--json FILE] [--pages MiB,...] (default 2,16)   Exit: 0 every call succeeded, 1 a driver call failed, 4 no driver/GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda_driver.hpp"
#include "gpumem/errors.hpp"

namespace {
using namespace gpumem::cuda;
using Clock = std::chrono::steady_clock;

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

struct Figures {
  std::size_t page = 0, pages = 0;
  double create = 0, map = 0, access_per_page = 0, access_per_run = 0, unmap = 0, unmap_run = 0, release = 0;
  double busy_create = 0, busy_map = 0, busy_access_per_run = 0;  // per page, while a kernel runs
  bool unmap_run_ok = false, busy_overlapped = true;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double us_since(Clock::time_point t0, std::size_t calls) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(calls);
}

constexpr std::size_t kGranule = std::size_t(2) << 20;

struct Setup {
  CUmemAllocationProp prop{};
  CUmemAccessDesc access{};
  CUdeviceptr va = 0, va2 = 0;  // two ranges of n pages: per-page access on one, per-run on the other
  CUdeviceptr base = 0, base2 = 0;  // their reservations, a granule longer: va = base + a granule
  cudaStream_t stream = nullptr;
  long long busy_cycles = 0;
};

enum Sample { kCreate, kMap, kAccessPage, kAccessRun, kUnmap, kUnmapRun, kRelease, kBusyCreate, kBusyMap, kBusyAccess, kSamples };

// One round: create `n` pages, map them side by side and set access page by page; map them again at va2
// and set access there in one call; unmap (page by page, or in one call when `unmap_whole`), release.
// With `busy`, only create + map + one access call at va2, timed while a kernel runs. False at a failure.
bool round(const Driver& d, const Setup& s, std::size_t page, std::size_t n, bool unmap_whole, bool busy, Figures& f,
           std::vector<double> (&samples)[kSamples]) {
  std::vector<CUmemGenericAllocationHandle> handles(n);
  if (busy) {
    spin<<<1, 1, 0, s.stream>>>(s.busy_cycles);
    if (cudaStreamQuery(s.stream) != cudaErrorNotReady) f.busy_overlapped = false;  // too short to tell
  }
  auto t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i)
    if (d.cuMemCreate(&handles[i], page, &s.prop, 0) != CUDA_SUCCESS) return false;
  samples[busy ? kBusyCreate : kCreate].push_back(us_since(t0, n));
  const CUdeviceptr first = busy ? s.va2 : s.va;
  t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i)
    if (d.cuMemMap(first + i * page, page, 0, handles[i], 0) != CUDA_SUCCESS) return false;
  samples[busy ? kBusyMap : kMap].push_back(us_since(t0, n));
  if (!busy) {
    t0 = Clock::now();
    for (std::size_t i = 0; i < n; ++i)
      if (d.cuMemSetAccess(s.va + i * page, page, &s.access, 1) != CUDA_SUCCESS) return false;
    samples[kAccessPage].push_back(us_since(t0, n));
    for (std::size_t i = 0; i < n; ++i)
      if (d.cuMemMap(s.va2 + i * page, page, 0, handles[i], 0) != CUDA_SUCCESS) return false;
  }
  t0 = Clock::now();
  if (d.cuMemSetAccess(s.va2, n * page, &s.access, 1) != CUDA_SUCCESS) return false;
  samples[busy ? kBusyAccess : kAccessRun].push_back(us_since(t0, n));
  if (busy && cudaStreamQuery(s.stream) != cudaErrorNotReady) f.busy_overlapped = false;  // waited, or slower
  if (busy) cudaStreamSynchronize(s.stream);
  for (CUdeviceptr base : {s.va, s.va2}) {
    if (busy && base == s.va) continue;
    if (unmap_whole && base == s.va) {
      t0 = Clock::now();
      f.unmap_run_ok = d.cuMemUnmap(base, n * page) == CUDA_SUCCESS;
      samples[kUnmapRun].push_back(us_since(t0, 1));
      if (f.unmap_run_ok) continue;
    }
    t0 = Clock::now();
    for (std::size_t i = 0; i < n; ++i)
      if (d.cuMemUnmap(base + i * page, page) != CUDA_SUCCESS) return false;
    if (!busy && base == s.va) samples[kUnmap].push_back(us_since(t0, n));
  }
  t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i)
    if (d.cuMemRelease(handles[i]) != CUDA_SUCCESS) return false;
  if (!busy) samples[kRelease].push_back(us_since(t0, n));
  return true;
}

bool measure(const Driver& d, int ordinal, std::size_t page, std::size_t n, Figures& f) {
  Setup s;
  s.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  s.prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, ordinal};
  s.access = {{CU_MEM_LOCATION_TYPE_DEVICE, ordinal}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, ordinal);
  s.busy_cycles = (long long)khz * 20;  // ~20 ms at the base clock: longer than any round's calls
  if (cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking) != cudaSuccess) return false;
  // Pages start one granule into a granule-aligned reservation, as the engine maps them (at the top of
  // a region, on any granule): a page size need not be a power of two, nor its address a multiple of it.
  bool ok = d.cuMemAddressReserve(&s.base, n * page + kGranule, kGranule, 0, 0) == CUDA_SUCCESS &&
            d.cuMemAddressReserve(&s.base2, n * page + kGranule, kGranule, 0, 0) == CUDA_SUCCESS;
  s.va = s.base + kGranule;
  s.va2 = s.base2 + kGranule;
  f.page = page;
  f.pages = n;
  std::vector<double> samples[kSamples];
  ok = ok && round(d, s, page, n, false, false, f, samples);  // warm-up, not counted
  for (auto& v : samples) v.clear();
  for (int r = 0; ok && r < 5; ++r) ok = round(d, s, page, n, r == 4, false, f, samples);
  for (int r = 0; ok && r < 5; ++r) ok = round(d, s, page, n, false, true, f, samples);
  if (s.base) d.cuMemAddressFree(s.base, n * page + kGranule);
  if (s.base2) d.cuMemAddressFree(s.base2, n * page + kGranule);
  cudaStreamDestroy(s.stream);
  if (!ok) return false;
  f.create = median(samples[kCreate]);
  f.map = median(samples[kMap]);
  f.access_per_page = median(samples[kAccessPage]);
  f.access_per_run = median(samples[kAccessRun]);
  f.unmap = median(samples[kUnmap]);
  f.unmap_run = samples[kUnmapRun].empty() ? 0 : samples[kUnmapRun][0];
  f.release = median(samples[kRelease]);
  f.busy_create = median(samples[kBusyCreate]);
  f.busy_map = median(samples[kBusyMap]);
  f.busy_access_per_run = median(samples[kBusyAccess]);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const char* json = nullptr;
  std::vector<std::size_t> sizes = {2, 16};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json = argv[++i];
    } else if (!std::strcmp(argv[i], "--pages") && i + 1 < argc) {
      sizes.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        const unsigned long mib = std::strtoul(p, &end, 10);
        if (end == p || mib == 0 || mib % 2 || mib > 4096 || (*end && *end != ',')) {
          std::fprintf(stderr, "vmm_cost: --pages takes even MiB counts up to 4096, comma-separated (2,16,64)\n");
          return 2;
        }
        sizes.push_back(mib);
        p = *end ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "usage: vmm_cost [--json FILE] [--pages MiB,MiB,...]\n");
      return 2;
    }
  }
  const Driver* d = nullptr;
  try {
    d = &driver();
  } catch (const gpumem::Error& e) {
    std::fprintf(stderr, "vmm_cost: %s\n", e.what());
    return 4;
  }
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (d->cuDeviceGet(&dev, 0) != CUDA_SUCCESS || d->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) {
    std::fprintf(stderr, "vmm_cost: no usable CUDA device 0\n");
    return 4;
  }
  d->cuCtxSetCurrent(ctx);
  std::vector<Figures> all;
  int failures = 0;
  std::printf("%-8s %6s %8s %8s %12s %12s %8s %10s %8s | busy: %8s %8s %12s %s\n", "page", "pages", "create", "map",
              "access/page", "access/run", "unmap", "unmap/run", "release", "create", "map", "access/run",
              "(us per page; busy: a kernel runs meanwhile)");
  for (std::size_t mib : sizes) {
    Figures f;
    const std::size_t n = std::max<std::size_t>(1, 512 / mib);  // 512 MiB in all (one page beyond)
    bool ok = measure(*d, 0, mib << 20, n, f);
    if (!ok) {
      std::printf("FAIL vmm_cost %zu MiB pages: a driver call failed\n", mib);
      ++failures;
      continue;
    }
    std::printf("%5zuMiB %6zu %8.2f %8.2f %12.2f %12.2f %8.2f %10s %8.2f | busy: %8.2f %8.2f %12.2f %s\n", mib, n,
                f.create, f.map, f.access_per_page, f.access_per_run, f.unmap,
                f.unmap_run_ok ? std::to_string(f.unmap_run).c_str() : "refused", f.release, f.busy_create, f.busy_map,
                f.busy_access_per_run, f.busy_overlapped ? "(returned while the kernel ran)" : "(the kernel ended before they returned)");
    std::printf("PASS vmm_cost %zu MiB pages: create+map+access %.2f us per page (access over a run), %.3f us per MiB\n",
                mib, f.create + f.map + f.access_per_run, (f.create + f.map + f.access_per_run) / double(mib));
    all.push_back(f);
  }
  if (json) {
    if (FILE* out = std::fopen(json, "w")) {
      std::fprintf(out, "[");
      for (std::size_t i = 0; i < all.size(); ++i) {
        const Figures& f = all[i];
        std::fprintf(out,
                     "%s{\"page\": %zu, \"pages\": %zu, \"create_us\": %.3f, \"map_us\": %.3f, \"access_per_page_us\": %.3f, "
                     "\"access_per_run_us\": %.3f, \"unmap_us\": %.3f, \"unmap_run_ok\": %s, \"unmap_run_us\": %.3f, "
                     "\"release_us\": %.3f, \"busy_create_us\": %.3f, \"busy_map_us\": %.3f, \"busy_access_per_run_us\": %.3f, "
                     "\"busy_overlapped\": %s}",
                     i ? ", " : "", f.page, f.pages, f.create, f.map, f.access_per_page, f.access_per_run, f.unmap,
                     f.unmap_run_ok ? "true" : "false", f.unmap_run, f.release, f.busy_create, f.busy_map,
                     f.busy_access_per_run, f.busy_overlapped ? "true" : "false");
      }
      std::fprintf(out, "]\n");
      std::fclose(out);
    }
  }
  d->cuDevicePrimaryCtxRelease(dev);
  return failures ? 1 : 0;
}
