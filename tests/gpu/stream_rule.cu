// GPU test of the stream rule (run by scripts/gpu-check.sh, not by ctest): a long kernel on stream A reads
// a block that is freed and reallocated on stream B; with record_stream(block, A) its data is never clobbered.
// A control run without record_stream must see the clobbering (so the test can fail), and a block freed
// while its own stream still reads it survives empty_cache() (the engine waits before unmapping).
// Exit status 0 when every check holds; prints one line per check.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpumem/allocator.hpp"
#include "gpumem/cuda_backend.hpp"

namespace {

int failures = 0;
void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++failures;
}
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::printf("FAIL %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__global__ void fill(unsigned* p, std::size_t n, unsigned value) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = value ^ unsigned(i);
}

// Spins for `cycles`, then checks every word; counts mismatches. One block keeps the check ordered after the spin.
__global__ void slow_check(const unsigned* p, std::size_t n, unsigned value, long long cycles, unsigned long long* bad) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  __syncthreads();
  unsigned long long local = 0;
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) local += p[i] != (value ^ unsigned(i));
  atomicAdd(bad, local);
}

constexpr std::size_t kBytes = std::size_t(64) << 20;
constexpr std::size_t kWords = kBytes / sizeof(unsigned);
constexpr long long kSpin = 400'000'000;  // ~0.2 s at 2 GHz: long enough for the host to free and reallocate

// Returns the mismatches the slow reader on stream A saw, and whether B's reallocation reused the block.
std::pair<unsigned long long, bool> reuse_scenario(gpumem::Allocator& alloc, cudaStream_t a, cudaStream_t b,
                                                   bool record, unsigned long long* bad) {
  auto sb = gpumem::StreamId(b);
  auto* block = static_cast<unsigned*>(alloc.allocate(kBytes, sb));
  fill<<<256, 256, 0, b>>>(block, kWords, 0x1234u);
  cuda_check(cudaStreamSynchronize(b), "fill");
  cuda_check(cudaMemset(bad, 0, sizeof *bad), "memset");
  slow_check<<<1, 1024, 0, a>>>(block, kWords, 0x1234u, kSpin, bad);
  if (record) alloc.record_stream(block, gpumem::StreamId(a));
  alloc.deallocate(block, sb);
  auto* again = static_cast<unsigned*>(alloc.allocate(kBytes, sb));
  fill<<<256, 256, 0, b>>>(again, kWords, 0xdeadu);  // would clobber the block if it were handed out too early
  cuda_check(cudaDeviceSynchronize(), "scenario");
  unsigned long long host_bad = 0;
  cuda_check(cudaMemcpy(&host_bad, bad, sizeof host_bad, cudaMemcpyDeviceToHost), "copy");
  bool reused = again == block;
  alloc.deallocate(again, sb);
  return {host_bad, reused};
}

}  // namespace

int main() {
  cuda_check(cudaSetDevice(0), "cudaSetDevice");
  cuda_check(cudaFree(nullptr), "context");  // the runtime's primary context, which the backend shares
  cudaStream_t a, b;
  cuda_check(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), "stream A");
  cuda_check(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "stream B");
  unsigned long long* bad = nullptr;
  cuda_check(cudaMalloc(&bad, sizeof *bad), "cudaMalloc");

  for (auto mode : {gpumem::CudaMemoryMode::virtual_memory, gpumem::CudaMemoryMode::plain}) {
    const char* name = mode == gpumem::CudaMemoryMode::plain ? "cuda-plain" : "cuda";
    gpumem::Allocator alloc(gpumem::make_cuda_backend(0, mode));
    auto [clobbered, reused] = reuse_scenario(alloc, a, b, /*record=*/false, bad);
    expect(reused && clobbered > 0, std::string(name) + ": control without record_stream: block reused at once, " +
                                        std::to_string(clobbered) + " words clobbered under the reader");
    auto [seen, reused2] = reuse_scenario(alloc, a, b, /*record=*/true, bad);
    expect(seen == 0, std::string(name) + ": with record_stream the reader on stream A saw " + std::to_string(seen) +
                          " clobbered words (reallocation " + (reused2 ? "reused the block" : "took other memory") + ")");
    // Once A passed the free, the block is reusable again on B.
    cuda_check(cudaDeviceSynchronize(), "sync");
    auto* x = alloc.allocate(kBytes, gpumem::StreamId(b));
    alloc.record_stream(x, gpumem::StreamId(a));
    alloc.deallocate(x, gpumem::StreamId(b));
    cuda_check(cudaDeviceSynchronize(), "sync");
    auto* y = alloc.allocate(kBytes, gpumem::StreamId(b));
    expect(x == y, std::string(name) + ": after stream A completed, the block is reused on stream B");
    alloc.deallocate(y, gpumem::StreamId(b));

    // Freed on its own stream while a kernel there still reads it, then the cache is emptied: the engine
    // must wait for the stream before unmapping, or the reader faults / sees garbage.
    auto* z = static_cast<unsigned*>(alloc.allocate(kBytes, gpumem::StreamId(b)));
    fill<<<256, 256, 0, b>>>(z, kWords, 0x77u);
    cuda_check(cudaMemsetAsync(bad, 0, sizeof *bad, b), "memset");
    slow_check<<<1, 1024, 0, b>>>(z, kWords, 0x77u, kSpin, bad);
    alloc.deallocate(z, gpumem::StreamId(b));
    alloc.empty_cache();
    cudaError_t err = cudaDeviceSynchronize();
    unsigned long long host_bad = ~0ull;
    if (err == cudaSuccess) cudaMemcpy(&host_bad, bad, sizeof host_bad, cudaMemcpyDeviceToHost);
    expect(err == cudaSuccess && host_bad == 0,
           std::string(name) + ": empty_cache while the block's own stream still reads it: " +
               (err == cudaSuccess ? std::to_string(host_bad) + " bad words" : cudaGetErrorString(err)));
    expect(alloc.stats().reserved_bytes[0].current == 0, std::string(name) + ": empty_cache released everything");
  }
  std::printf("%s stream_rule: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
