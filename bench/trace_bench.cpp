// What recording an allocation trace costs the program that records it (Google Benchmark).
//
//  - BM_WorkAlone:          ~3 us of other work per iteration, as between a program's allocator events
//  - BM_WorkWhileRecording: the same, plus one event written to a .jsonl.gz trace (TraceWriter)
//  - BM_WorkWhileRecordingFlushed: the same as the recorder writes it: under a mutex, which a thread of
//    its own takes once a second to flush() the writer (so that a killed process leaves a readable trace)
// The difference is the trace's cost per event on the recording thread; the compression runs on the
// writer's own thread (compare with --benchmark_min_time long enough to fill several 1 MiB buffers).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "gpumem/trace.hpp"
#include "gpumem/trace_writer.hpp"

namespace {

using gpumem::trace::Event;
using gpumem::trace::Op;

void other_work() {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::microseconds(3)) {
  }
}

void BM_WorkAlone(benchmark::State& state) {
  for (auto _ : state) other_work();
}
BENCHMARK(BM_WorkAlone)->UseRealTime();

Event nth_event(std::uint64_t i) {
  Event e;  // alloc, free, free_completed of one block in turn, as the recorder writes them
  e.op = i % 3 == 0 ? Op::alloc : (i % 3 == 1 ? Op::free : Op::free_completed);
  e.t = 3 * i;
  e.addr = 0x7f0000000000ull + (i / 3 % 4096) * 512;
  e.size = 512 * (1 + i / 3 % 2048);
  e.stream = i % 2;
  return e;
}

void BM_WorkWhileRecording(benchmark::State& state) {
  const std::string path = "/tmp/gpumem-trace-bench-" + std::to_string(getpid()) + ".jsonl.gz";
  {
    gpumem::trace::TraceWriter writer(path, "trace_bench", "");
    std::uint64_t i = 0;
    for (auto _ : state) {
      other_work();
      writer.write(nth_event(i++));
    }
    writer.close();  // after the timed loop: at most ~9 MiB of lines still queued are not counted
  }
  std::remove(path.c_str());
}
BENCHMARK(BM_WorkWhileRecording)->UseRealTime();

void BM_WorkWhileRecordingFlushed(benchmark::State& state) {
  const std::string path = "/tmp/gpumem-trace-bench-" + std::to_string(getpid()) + ".flushed.jsonl.gz";
  {
    gpumem::trace::TraceWriter writer(path, "trace_bench", "");
    std::mutex mutex;
    std::mutex flusher_mutex;
    std::condition_variable wake;
    bool stop = false;
    std::thread flusher([&] {
      std::unique_lock lock(flusher_mutex);
      while (!wake.wait_for(lock, std::chrono::seconds(1), [&] { return stop; })) {
        std::lock_guard writing(mutex);
        writer.flush();
      }
    });
    std::uint64_t i = 0;
    for (auto _ : state) {
      other_work();
      std::lock_guard writing(mutex);
      writer.write(nth_event(i++));
    }
    {
      std::lock_guard lock(flusher_mutex);
      stop = true;
    }
    wake.notify_all();
    flusher.join();
    writer.close();
  }
  std::remove(path.c_str());
}
BENCHMARK(BM_WorkWhileRecordingFlushed)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
