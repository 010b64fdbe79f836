// Host cost of allocation on a real GPU, side by side in one process (run by scripts/gpu-check.sh):
// gpumem (engine over the CUDA VMM backend) vs PyTorch's c10 CUDACachingAllocator (raw_alloc/raw_delete,
// through bench/gpu/c10_shim.so built against the torch wheel) vs cudaMallocAsync (release threshold at
// max) vs cudaMalloc. Patterns: 1 MiB alloc+free pairs; log-uniform 512 B..64 MiB over 1000 slots, seed 42
// (a random slot each step: free it if used, else allocate). Each figure is the median of 5 runs.
// Usage: host_cost [path/to/c10_shim.so] [--json FILE]
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gpumem/allocator.hpp"
#include "gpumem/cuda_backend.hpp"

namespace {

struct Candidate {
  std::string name;
  std::function<void*(std::size_t)> alloc;
  std::function<void(void*)> free;
  std::function<void()> trim;
  long mixed_ops;  // cudaMalloc is far slower: fewer operations keep the run short
};

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "host_cost: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double pair_ns(const Candidate& c, long iterations) {
  for (int i = 0; i < 1000; ++i) c.free(c.alloc(1 << 20));  // warm: the first pair fetches device memory
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iterations; ++i) c.free(c.alloc(1 << 20));
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / double(iterations);
}

// Sizes and slot choices are drawn before timing, identical for every candidate.
struct MixedPlan {
  std::vector<std::uint32_t> slot;
  std::vector<std::size_t> size;
};
MixedPlan mixed_plan(long ops) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<std::uint32_t> pick(0, 999);
  std::uniform_real_distribution<double> logsize(std::log(512.0), std::log(64.0 * 1024 * 1024));
  MixedPlan p;
  p.slot.resize(std::size_t(ops));
  p.size.resize(std::size_t(ops));
  for (long i = 0; i < ops; ++i) {
    p.slot[std::size_t(i)] = pick(rng);
    p.size[std::size_t(i)] = std::size_t(std::exp(logsize(rng)));
  }
  return p;
}

double mixed_ns(const Candidate& c, const MixedPlan& plan, long ops) {
  std::vector<void*> slots(1000, nullptr);
  auto run = [&](long n) {
    for (long i = 0; i < n; ++i) {
      void*& s = slots[plan.slot[std::size_t(i)]];
      if (s) {
        c.free(s);
        s = nullptr;
      } else {
        s = c.alloc(plan.size[std::size_t(i)]);
      }
    }
  };
  run(std::min<long>(ops, 20000));  // warm the cache with the same pattern
  for (void*& s : slots)
    if (s) c.free(s), s = nullptr;
  auto t0 = std::chrono::steady_clock::now();
  run(ops);
  auto t1 = std::chrono::steady_clock::now();
  for (void*& s : slots)
    if (s) c.free(s), s = nullptr;
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / double(ops);
}

}  // namespace

int main(int argc, char** argv) {
  const char* shim_path = nullptr;
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else shim_path = argv[i];
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaFree(nullptr), "context");
  std::vector<Candidate> candidates;

  auto gpumem_alloc = std::make_shared<gpumem::Allocator>(gpumem::make_cuda_backend(0));
  candidates.push_back({"gpumem", [=](std::size_t n) { return gpumem_alloc->allocate(n, 0); },
                        [=](void* p) { gpumem_alloc->deallocate(p, 0); }, [=] { gpumem_alloc->empty_cache(); },
                        1'000'000});

  if (shim_path) {
    void* lib = dlopen(shim_path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      std::fprintf(stderr, "host_cost: cannot load %s: %s\n", shim_path, dlerror());
      return 1;
    }
    auto init = reinterpret_cast<int (*)()>(dlsym(lib, "c10_shim_init"));
    auto a = reinterpret_cast<void* (*)(std::size_t)>(dlsym(lib, "c10_shim_alloc"));
    auto f = reinterpret_cast<void (*)(void*)>(dlsym(lib, "c10_shim_free"));
    auto e = reinterpret_cast<void (*)()>(dlsym(lib, "c10_shim_empty_cache"));
    if (!init || !a || !f || !e) {
      std::fprintf(stderr, "host_cost: %s lacks the c10_shim_* functions\n", shim_path);
      return 1;
    }
    init();
    candidates.push_back({"c10 CUDACachingAllocator", a, f, e, 1'000'000});
  }

  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, 0), "default pool");
  std::uint64_t threshold = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), "release threshold");
  candidates.push_back({"cudaMallocAsync (threshold max)",
                        [](std::size_t n) {
                          void* p = nullptr;
                          check(cudaMallocAsync(&p, n, 0), "cudaMallocAsync");
                          return p;
                        },
                        [](void* p) { check(cudaFreeAsync(p, 0), "cudaFreeAsync"); },
                        [pool] {
                          check(cudaDeviceSynchronize(), "sync");
                          cudaMemPoolTrimTo(pool, 0);
                        },
                        1'000'000});
  candidates.push_back({"cudaMalloc",
                        [](std::size_t n) {
                          void* p = nullptr;
                          check(cudaMalloc(&p, n), "cudaMalloc");
                          return p;
                        },
                        [](void* p) { check(cudaFree(p), "cudaFree"); }, [] {}, 20'000});

  const MixedPlan plan = mixed_plan(1'000'000);
  std::printf("%-34s %14s %14s\n", "allocator", "1MiB pair ns", "mixed op ns");
  std::string json = "[";
  for (const Candidate& c : candidates) {
    std::vector<double> pairs, mixed;
    long pair_iters = c.mixed_ops >= 1'000'000 ? 1'000'000 : 20'000;
    for (int r = 0; r < 5; ++r) {
      pairs.push_back(pair_ns(c, pair_iters));
      mixed.push_back(mixed_ns(c, plan, c.mixed_ops));
    }
    c.trim();
    double p = median(pairs), m = median(mixed);
    std::printf("%-34s %14.1f %14.1f\n", c.name.c_str(), p, m);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s{\"allocator\":\"%s\",\"pair_ns\":%.2f,\"mixed_ns\":%.2f}", json.size() > 1 ? "," : "",
                  c.name.c_str(), p, m);
    json += buf;
  }
  json += "]";
  if (json_path) {
    FILE* f = std::fopen(json_path, "w");
    if (f) {
      std::fprintf(f, "%s\n", json.c_str());
      std::fclose(f);
    }
  }
  check(cudaDeviceSynchronize(), "final sync");
  return 0;
}
