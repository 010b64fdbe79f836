// What each CUDA virtual-memory driver call costs on this GPU (run by scripts/gpu-check.sh), to choose
// the page size and the batching of the CUDA backend: cuMemCreate, cuMemMap, cuMemSetAccess (one call
// per page, and one call over a whole run of pages), cuMemUnmap (per page, and one call over a run of
// separately mapped pages, which tells whether the driver allows it) and cuMemRelease, at 2 MiB and
// 16 MiB pages. Each figure is the median of 5 rounds of `pages` calls, in microseconds per call.
// Prints one PASS/FAIL line per page size; with --json FILE also writes the figures.
// Usage: vmm_cost [--json FILE]   Exit: 0 every call succeeded, 1 a driver call failed, 4 no driver/GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda_driver.hpp"
#include "gpumem/errors.hpp"

namespace {
using namespace gpumem::cuda;
using Clock = std::chrono::steady_clock;

struct Figures {
  std::size_t page = 0, pages = 0;
  double create = 0, map = 0, access_per_page = 0, access_per_run = 0, unmap = 0, unmap_run = 0, release = 0;
  bool unmap_run_ok = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double us_since(Clock::time_point t0, std::size_t calls) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(calls);
}

// One round: create `n` pages, map them side by side, set access page by page and over the run, unmap
// (page by page, or in one call when `unmap_whole`), release. Returns false at the first failure.
bool round(const Driver& d, const CUmemAllocationProp& prop, const CUmemAccessDesc& access, CUdeviceptr va,
           std::size_t page, std::size_t n, bool unmap_whole, Figures& f, std::vector<double> (&samples)[7]) {
  std::vector<CUmemGenericAllocationHandle> handles(n);
  auto t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i)
    if (d.cuMemCreate(&handles[i], page, &prop, 0) != CUDA_SUCCESS) return false;
  samples[0].push_back(us_since(t0, n));
  t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i)
    if (d.cuMemMap(va + i * page, page, 0, handles[i], 0) != CUDA_SUCCESS) return false;
  samples[1].push_back(us_since(t0, n));
  t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i)
    if (d.cuMemSetAccess(va + i * page, page, &access, 1) != CUDA_SUCCESS) return false;
  samples[2].push_back(us_since(t0, n));
  t0 = Clock::now();
  if (d.cuMemSetAccess(va, n * page, &access, 1) != CUDA_SUCCESS) return false;
  samples[3].push_back(us_since(t0, 1));
  if (unmap_whole) {
    t0 = Clock::now();
    f.unmap_run_ok = d.cuMemUnmap(va, n * page) == CUDA_SUCCESS;
    samples[5].push_back(us_since(t0, 1));
  }
  if (!unmap_whole || !f.unmap_run_ok) {
    t0 = Clock::now();
    for (std::size_t i = 0; i < n; ++i)
      if (d.cuMemUnmap(va + i * page, page) != CUDA_SUCCESS) return false;
    samples[4].push_back(us_since(t0, n));
  }
  t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i)
    if (d.cuMemRelease(handles[i]) != CUDA_SUCCESS) return false;
  samples[6].push_back(us_since(t0, n));
  return true;
}

bool measure(const Driver& d, int ordinal, std::size_t page, std::size_t n, Figures& f) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, ordinal};
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, ordinal}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUdeviceptr va = 0;
  if (d.cuMemAddressReserve(&va, n * page, page, 0, 0) != CUDA_SUCCESS) return false;
  f.page = page;
  f.pages = n;
  std::vector<double> samples[7];
  bool ok = round(d, prop, access, va, page, n, false, f, samples);  // warm-up, not counted
  for (auto& s : samples) s.clear();
  for (int r = 0; ok && r < 5; ++r) ok = round(d, prop, access, va, page, n, r == 4, f, samples);
  d.cuMemAddressFree(va, n * page);
  if (!ok) return false;
  f.create = median(samples[0]);
  f.map = median(samples[1]);
  f.access_per_page = median(samples[2]);
  f.access_per_run = median(samples[3]);
  f.unmap = median(samples[4]);
  f.unmap_run = samples[5].empty() ? 0 : samples[5][0];
  f.release = median(samples[6]);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: vmm_cost [--json FILE]\n");
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
  std::printf("%-8s %6s %10s %10s %14s %14s %10s %14s %10s  (us per call)\n", "page", "pages", "create", "map",
              "access/page", "access/run", "unmap", "unmap/run", "release");
  for (std::size_t mib : {2, 16}) {
    Figures f;
    const std::size_t n = mib == 2 ? 256 : 32;  // 512 MiB either way
    bool ok = measure(*d, 0, mib << 20, n, f);
    if (!ok) {
      std::printf("FAIL vmm_cost %zu MiB pages: a driver call failed\n", mib);
      ++failures;
      continue;
    }
    std::printf("%5zuMiB %6zu %10.2f %10.2f %14.2f %14.2f %10.2f %14s %10.2f\n", mib, n, f.create, f.map,
                f.access_per_page, f.access_per_run, f.unmap,
                f.unmap_run_ok ? std::to_string(f.unmap_run).c_str() : "refused", f.release);
    std::printf("PASS vmm_cost %zu MiB pages: create+map+access per page %.2f us, per MiB %.3f us (access once per run)\n",
                mib, f.create + f.map + f.access_per_page, (f.create + f.map + f.access_per_run / double(n)) / double(mib));
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
                     "\"release_us\": %.3f}",
                     i ? ", " : "", f.page, f.pages, f.create, f.map, f.access_per_page, f.access_per_run, f.unmap,
                     f.unmap_run_ok ? "true" : "false", f.unmap_run, f.release);
      }
      std::fprintf(out, "]\n");
      std::fclose(out);
    }
  }
  d->cuDevicePrimaryCtxRelease(dev);
  return failures ? 1 : 0;
}
