#include "api/trace_recorder.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "api/registry_internal.hpp"
#include "gpumem/trace_writer.hpp"

namespace gpumem::api {
namespace {

struct Recorder final : AllocatorObserver {
  void on_event(const MemoryEvent& e) noexcept override;
  std::mutex mutex;
  std::mutex starting_or_stopping;  // held through trace_start / trace_stop, so a file closes before another opens
  std::unique_ptr<trace::TraceWriter> writer;
  // address -> requested size, for `free` and `free_completed` events; kept from the alloc to the
  // free_completed (the address is not handed out again before it).
  std::unordered_map<DevicePtr, std::size_t> live;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  // The flusher: a thread that has the writer flush about once a second while recording, so that a
  // process killed (SIGTERM, SIGKILL, a crash, _exit) leaves its trace readable up to a second before.
  // It takes `mutex` only to hand the writer's buffer to the writer's own thread, never for disk I/O.
  // Never joined in a forked child, where it does not exist.
  std::mutex flusher_mutex;
  std::condition_variable flusher_wake;
  bool flusher_stop = false;
  std::thread* flusher = nullptr;
};

constexpr auto kFlushInterval = std::chrono::seconds(1);

std::atomic<bool> recording{false};
std::once_flag env_checked;

Recorder& recorder() {
  static Recorder* r = new Recorder;  // never destroyed: frees may arrive during static destruction
  return *r;
}

// The header names the GPU of the first allocator that records (traces come from one device each).
void name_device(Recorder& r, Allocator& allocator) {
  {
    std::lock_guard lock(r.mutex);
    if (!r.writer || !r.writer->device().empty()) return;  // named already: no driver call
  }
  std::string name;  // asked without the lock: the driver call may be slow
  try {
    name = allocator.backend().device_name();
  } catch (...) {
  }
  std::lock_guard lock(r.mutex);
  if (r.writer && r.writer->device().empty()) r.writer->set_device(name);
}

// The allocators hold it by shared_ptr; it is never deleted.
std::shared_ptr<AllocatorObserver> recorder_handle() {
  static std::shared_ptr<AllocatorObserver> h(&recorder(), [](AllocatorObserver*) {});
  return h;
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
      if (op == trace::Op::free_completed) r.live.erase(it);
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

void Recorder::on_event(const MemoryEvent& e) noexcept {
  // A zero-byte request gets no memory and no event: nothing to replay.
  if (e.kind == EventKind::alloc) record(trace::Op::alloc, e.addr, e.requested, e.stream);
  else if (e.kind == EventKind::free_requested) record(trace::Op::free, e.addr, 0, e.stream);
  // When the block became reusable: later than its free where another stream still used it (record_stream),
  // so a replay holds it as long as the program's allocator had to.
  else if (e.kind == EventKind::free_completed) record(trace::Op::free_completed, e.addr, 0, e.stream);
}

void flush_loop() {
  Recorder& r = recorder();
  std::unique_lock lock(r.flusher_mutex);
  for (;;) {
    if (r.flusher_wake.wait_for(lock, kFlushInterval, [&] { return r.flusher_stop; })) return;
    lock.unlock();
    {
      std::lock_guard recording_lock(r.mutex);
      if (r.writer) {
        try {
          r.writer->flush();
        } catch (const std::exception& ex) {
          std::fprintf(stderr, "gpumem: allocation trace stopped: %s\n", ex.what());
          r.writer.reset();
          recording = false;
        }
      }
    }
    lock.lock();
  }
}

void start_flusher(Recorder& r) {
  if (r.flusher) return;
  {
    std::lock_guard lock(r.flusher_mutex);
    r.flusher_stop = false;
  }
  r.flusher = new std::thread(flush_loop);
}

void stop_flusher(Recorder& r) {
  if (!r.flusher) return;
  {
    std::lock_guard lock(r.flusher_mutex);
    r.flusher_stop = true;
  }
  r.flusher_wake.notify_all();
  r.flusher->join();
  delete r.flusher;
  r.flusher = nullptr;
}

// fork() while the flusher holds the recorder's mutex would leave it locked forever in the child: the
// mutex is held across fork. The child has no flusher (threads do not survive fork): its handle is let go.
void before_fork() { recorder().mutex.lock(); }
void after_fork_in_parent() { recorder().mutex.unlock(); }
void after_fork_in_child() {
  Recorder& r = recorder();
  r.flusher = nullptr;  // the parent's thread: neither joined nor freed here
  r.mutex.unlock();
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
  std::lock_guard one_at_a_time(r.starting_or_stopping);
  {
    std::lock_guard lock(r.mutex);
    // The new file first: a path that cannot be written leaves the trace underway running. The same
    // file again (however spelled) starts afresh: the old writer goes first, and with it the trace.
    if (r.writer && r.writer->writes(path)) {
      recording = false;
      r.writer.reset();  // closes it (a write error it finds is reported at close: none to report here)
    }
    auto writer = std::make_unique<trace::TraceWriter>(path, "gpumem recorder", "");
    if (r.writer) r.writer->close();
    r.writer = std::move(writer);
    if (r.writer->redirected())
      std::fprintf(stderr, "gpumem: another process is writing the trace %s; this one (pid %d) writes %s\n", path.c_str(),
                   int(getpid()), r.writer->path().c_str());
    r.live.clear();
    r.start = std::chrono::steady_clock::now();
    recording = true;
  }
  // Outside our mutex: an allocating thread holds the allocator's locks, then takes ours.
  for_each_default_allocator([](Allocator& a) {
    name_device(recorder(), a);
    a.add_observer(recorder_handle());
  });
  start_flusher(r);
  static std::once_flag at_exit;
  std::call_once(at_exit, [] {
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    std::atexit(stop_at_exit);
  });
}

std::size_t trace_stop() {
  Recorder& r = recorder();
  std::lock_guard one_at_a_time(r.starting_or_stopping);
  stop_flusher(r);
  for_each_default_allocator([](Allocator& a) { a.remove_observer(&recorder()); });
  std::unique_ptr<trace::TraceWriter> writer;
  {
    std::lock_guard lock(r.mutex);
    recording = false;
    writer = std::move(r.writer);
    r.live.clear();
  }
  if (!writer) return 0;
  // Outside the lock: closing waits for the writer's queued buffers, and threads still freeing blocks
  // take the lock (to find no writer) meanwhile.
  std::size_t n = writer->events_written();
  writer->close();
  return n;
}

void trace_attach(Allocator& allocator) {
  std::call_once(env_checked, [] {
    const char* path = std::getenv("GPUMEM_TRACE");
    if (!path || !*path || recording) return;
    try {
      trace_start(path);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpumem: GPUMEM_TRACE: %s\n", e.what());
    }
  });
  if (!recording.load()) return;
  name_device(recorder(), allocator);
  allocator.add_observer(recorder_handle());
}

}  // namespace gpumem::api
