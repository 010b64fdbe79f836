// Host cost of the engine on the sim backend (no device memory is touched, so this is pure CPU work):
//  - BM_MallocFree:        allocate + deallocate of one size in a loop (target <= 40 ns per pair at 1 MiB)
//  - BM_MixedSizes:        1000 live slots, sizes log-uniform 512 B..64 MiB, seed 42; each step picks a
//                          slot and frees it if used, else allocates (target <= 80 ns per operation)
//  - BM_StreamsInParallel: N threads, each on its own stream, malloc+free of mixed small sizes; total
//                          throughput should grow with threads up to the cores there are (no global lock)
// The random sequences are generated before the timed loops.
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "gpumem/allocator.hpp"
#include "gpumem/sim_backend.hpp"

namespace {

using gpumem::Allocator;
using gpumem::SimBackend;
using gpumem::SimBackendOptions;
using gpumem::StreamId;

std::shared_ptr<SimBackend> sim_device() {
  SimBackendOptions o;
  o.capacity = std::size_t(80) << 30;  // an H100's worth
  return std::make_shared<SimBackend>(o);
}

void BM_MallocFree(benchmark::State& state) {
  Allocator alloc(sim_device());
  const auto bytes = std::size_t(state.range(0));
  alloc.deallocate(alloc.allocate(bytes, 0), 0);  // the first call grows the pool; not what is measured
  for (auto _ : state) {
    void* p = alloc.allocate(bytes, 0);
    benchmark::DoNotOptimize(p);
    alloc.deallocate(p, 0);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("ns per allocate+free pair");
}
BENCHMARK(BM_MallocFree)->Arg(512)->Arg(1 << 20)->Arg(8 << 20);

struct MixedSequence {
  static constexpr std::size_t kSlots = 1000;
  static constexpr std::size_t kSteps = std::size_t(1) << 20;  // power of two: the loop wraps with a mask
  std::vector<std::uint32_t> slot;
  std::vector<std::size_t> bytes;
  MixedSequence(std::size_t min_bytes, std::size_t max_bytes, std::uint64_t seed) : slot(kSteps), bytes(kSteps) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> log_size(std::log(double(min_bytes)), std::log(double(max_bytes)));
    for (std::size_t i = 0; i < kSteps; ++i) {
      slot[i] = std::uint32_t(rng() % kSlots);
      bytes[i] = std::size_t(std::exp(log_size(rng)));
    }
  }
};

void BM_MixedSizes(benchmark::State& state) {
  static const MixedSequence seq(512, std::size_t(64) << 20, 42);
  Allocator alloc(sim_device());
  std::vector<void*> live(MixedSequence::kSlots, nullptr);
  std::size_t i = 0;
  // One pass untimed so the measured loop runs in the steady state (about half the slots live).
  for (; i < MixedSequence::kSlots * 4; ++i) {
    void*& p = live[seq.slot[i]];
    if (p) alloc.deallocate(p, 0), p = nullptr;
    else p = alloc.allocate(seq.bytes[i], 0);
  }
  for (auto _ : state) {
    const std::size_t k = i++ & (MixedSequence::kSteps - 1);
    void*& p = live[seq.slot[k]];
    if (p) {
      alloc.deallocate(p, 0);
      p = nullptr;
    } else {
      p = alloc.allocate(seq.bytes[k], 0);
    }
    benchmark::ClobberMemory();  // (DoNotOptimize(p) on this reference miscompiles with benchmark 1.7.1 + g++ 12)
  }
  state.SetItemsProcessed(state.iterations());
  const gpumem::DeviceStats s = alloc.stats();
  state.counters["reserved_over_allocated"] =
      double(s.reserved_bytes[0].peak) / double(std::max<std::int64_t>(1, s.allocated_bytes[0].peak));
  for (void* p : live)
    if (p) alloc.deallocate(p, 0);
  state.SetLabel("ns per operation");
}
BENCHMARK(BM_MixedSizes);

// One allocator shared by every thread; each thread allocates on its own stream. Thread 0 replaces it
// at the start of each run (the previous run's threads have all finished by then; freeing after the
// timed loop still runs on the others when thread 0 leaves it).
std::unique_ptr<Allocator> shared_alloc;

void BM_StreamsInParallel(benchmark::State& state) {
  static const MixedSequence seq(512, std::size_t(1) << 20, 7);
  if (state.thread_index() == 0) shared_alloc = std::make_unique<Allocator>(sim_device());
  const StreamId stream = StreamId(state.thread_index()) + 1;
  std::size_t i = std::size_t(state.thread_index()) * 4099;
  std::vector<void*> live(64, nullptr);
  for (auto _ : state) {
    const std::size_t k = i++ & (MixedSequence::kSteps - 1);
    void*& p = live[seq.slot[k] & 63];
    if (p) {
      shared_alloc->deallocate(p, stream);
      p = nullptr;
    } else {
      p = shared_alloc->allocate(seq.bytes[k], stream);
    }
    benchmark::ClobberMemory();
  }
  for (void* p : live)
    if (p) shared_alloc->deallocate(p, stream);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_StreamsInParallel)->ThreadRange(1, 8)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
