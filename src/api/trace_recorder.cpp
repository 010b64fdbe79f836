#include "api/trace_recorder.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "gpumem/trace_writer.hpp"

namespace gpumem::api {
namespace {

struct Recorder {
  std::mutex mutex;
  std::unique_ptr<trace::TraceWriter> writer;
  std::unordered_map<DevicePtr, std::size_t> live;  // address -> requested size, for `free` events
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

std::atomic<bool> recording{false};
std::mutex order_mutex;  // TraceOrderGuard's; never taken inside Recorder::mutex
std::once_flag env_checked;

Recorder& recorder() {
  static Recorder* r = new Recorder;  // never destroyed: frees may arrive during static destruction
  return *r;
}

std::uint64_t now_us(const Recorder& r) {
  return std::uint64_t(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - r.start).count());
}

void record(trace::Op op, DevicePtr ptr, std::size_t size, StreamId stream) noexcept {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  if (!r.writer) return;
  try {
    if (op == trace::Op::alloc) {
      r.live[ptr] = size;
    } else {
      auto it = r.live.find(ptr);
      if (it == r.live.end()) return;  // allocated before recording started
      size = it->second;
      r.live.erase(it);
    }
    trace::Event e;
    e.t = now_us(r);
    e.op = op;
    e.addr = ptr;
    e.size = size;
    e.stream = stream;
    r.writer->write(e);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "gpumem: allocation trace stopped: %s\n", ex.what());
    r.writer.reset();
    recording = false;
  }
}

void stop_at_exit() {
  try {
    trace_stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpumem: %s\n", e.what());
  }
}
}  // namespace

void trace_start(const std::string& path) {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  if (r.writer) r.writer->close();
  r.writer = std::make_unique<trace::TraceWriter>(path, "gpumem recorder", "");
  r.live.clear();
  r.start = std::chrono::steady_clock::now();
  recording = true;
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(stop_at_exit); });
}

std::size_t trace_stop() {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  recording = false;
  if (!r.writer) return 0;
  std::size_t n = r.writer->events_written();
  auto writer = std::move(r.writer);
  r.live.clear();
  writer->close();
  return n;
}

void trace_start_from_env() {
  std::call_once(env_checked, [] {
    const char* path = std::getenv("GPUMEM_TRACE");
    if (!path || !*path || recording) return;
    try {
      trace_start(path);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpumem: GPUMEM_TRACE: %s\n", e.what());
    }
  });
}

void trace_alloc(DevicePtr ptr, std::size_t size, StreamId stream) noexcept {
  // A zero-byte request gets no memory (nullptr): nothing to replay.
  if (ptr && recording.load(std::memory_order_relaxed)) record(trace::Op::alloc, ptr, size, stream);
}

void trace_free(DevicePtr ptr, StreamId stream) noexcept {
  if (recording.load(std::memory_order_relaxed)) record(trace::Op::free, ptr, 0, stream);
}

TraceOrderGuard::TraceOrderGuard() noexcept {
  if (recording.load(std::memory_order_relaxed)) {
    order_mutex.lock();
    held_ = true;
  }
}

TraceOrderGuard::~TraceOrderGuard() {
  if (held_) order_mutex.unlock();
}

}  // namespace gpumem::api
