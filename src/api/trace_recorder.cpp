#include "api/trace_recorder.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api/registry_internal.hpp"
#include "gpumem/trace_writer.hpp"

namespace gpumem::api {
namespace {

// What is recorded of one device: a trace holds one device (its addresses are that device's, and a replay
// plays them on one). The first device to allocate writes the file named; each other device d writes
// NAME.devD.EXT beside it, said once on stderr.
struct DeviceTrace {
  std::unique_ptr<trace::TraceWriter> writer;  // null once its file failed: its events are dropped
  // address -> requested size, for `free` and `free_completed` events; kept from the alloc to the
  // free_completed (the address is not handed out again before it).
  std::unordered_map<DevicePtr, std::size_t> live;
};

struct Recorder {
  std::mutex mutex;
  std::mutex starting_or_stopping;  // held through trace_start / trace_stop, so a file closes before another opens
  std::string path;                 // as given to trace_start
  // The file named, opened at trace_start (so that a path that cannot be written is an error there), until
  // the first device to allocate takes it.
  std::unique_ptr<trace::TraceWriter> unclaimed;
  std::map<int, DeviceTrace> devices;  // by the default allocators' device index
  std::map<int, std::string> names;    // each device's name for its header, asked when its allocator is attached
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  // The flusher: a thread that has the writers flush about once a second while recording, so that a
  // process killed (SIGTERM, SIGKILL, a crash, _exit) leaves its trace readable up to a second before.
  // It takes `mutex` only to hand the writers' buffers to their own threads, never for disk I/O.
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

// "run/trace.jsonl.gz", 1 -> "run/trace.dev1.jsonl.gz": the device before the first dot of the file's name.
std::string device_path(const std::string& path, int device) {
  const std::size_t name = path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1;
  const std::size_t dot = path.find('.', name + 1);
  const std::string tag = ".dev" + std::to_string(device);
  return dot == std::string::npos ? path + tag : path.substr(0, dot) + tag + path.substr(dot);
}

// Asks the device's name for its trace's header, once per device, outside the lock (a driver call).
void name_device(Recorder& r, int device, Allocator& allocator) {
  {
    std::lock_guard lock(r.mutex);
    if (r.names.count(device)) return;
  }
  std::string name;
  try {
    name = allocator.backend().device_name();
  } catch (...) {
  }
  std::lock_guard lock(r.mutex);
  r.names.emplace(device, name);
}

// The trace of `device`, opened at its first event (with the lock held); null when it cannot be written.
DeviceTrace* device_trace(Recorder& r, int device) {
  auto it = r.devices.find(device);
  if (it != r.devices.end()) return it->second.writer ? &it->second : nullptr;
  DeviceTrace& d = r.devices[device];
  const auto name = r.names.find(device);
  try {
    if (r.unclaimed) {
      d.writer = std::move(r.unclaimed);
    } else {
      d.writer = std::make_unique<trace::TraceWriter>(device_path(r.path, device), "gpumem recorder", "");
      std::fprintf(stderr, "gpumem: this process allocates on device %d too; a trace holds one device, so its events go to %s\n",
                   device, d.writer->path().c_str());
    }
    d.writer->set_device(name == r.names.end() ? "" : name->second);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpumem: device %d is not traced: %s\n", device, e.what());
    d.writer.reset();
    return nullptr;
  }
  return &d;
}

std::uint64_t now_us(const Recorder& r) {
  return std::uint64_t(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - r.start).count());
}

void record(int device, trace::Op op, DevicePtr ptr, std::size_t size, StreamId stream) noexcept {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  if (!recording.load(std::memory_order_relaxed)) return;
  DeviceTrace* d = device_trace(r, device);
  if (!d) return;
  try {
    if (op == trace::Op::alloc) {
      d->live[ptr] = size;
    } else {
      auto it = d->live.find(ptr);
      if (it == d->live.end()) return;  // allocated before recording started
      size = it->second;
      if (op == trace::Op::free_completed) d->live.erase(it);
    }
    trace::Event e;
    e.t = now_us(r);
    e.op = op;
    e.addr = ptr;
    e.size = size;
    e.stream = stream;
    d->writer->write(e);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "gpumem: allocation trace stopped: %s\n", ex.what());
    d->writer.reset();
    d->live.clear();
  }
}

// Observes one device's default allocator (the backend's own device number is not the allocator's index
// for the sim and host backends). One per device, never deleted: the allocators hold it by shared_ptr.
struct DeviceObserver final : AllocatorObserver {
  explicit DeviceObserver(int d) : device(d) {}
  void on_event(const MemoryEvent& e) noexcept override {
    // A zero-byte request gets no memory and no event: nothing to replay.
    if (e.kind == EventKind::alloc) record(device, trace::Op::alloc, e.addr, e.requested, e.stream);
    else if (e.kind == EventKind::free_requested) record(device, trace::Op::free, e.addr, 0, e.stream);
    // When the block became reusable: later than its free where another stream still used it (record_stream),
    // so a replay holds it as long as the program's allocator had to.
    else if (e.kind == EventKind::free_completed) record(device, trace::Op::free_completed, e.addr, 0, e.stream);
  }
  const int device;
};

std::shared_ptr<AllocatorObserver> observer_of(int device) {
  static std::mutex mutex;
  static auto* handles = new std::map<int, std::shared_ptr<AllocatorObserver>>;
  std::lock_guard lock(mutex);
  auto& h = (*handles)[device];
  if (!h) h.reset(new DeviceObserver(device), [](AllocatorObserver*) {});
  return h;
}

// Every writer of the trace underway (the lock held).
template <typename Fn>
void for_each_writer(Recorder& r, Fn fn) {
  if (r.unclaimed) fn(r.unclaimed);
  for (auto& [device, d] : r.devices)
    if (d.writer) fn(d.writer);
}

void flush_loop() {
  Recorder& r = recorder();
  std::unique_lock lock(r.flusher_mutex);
  for (;;) {
    if (r.flusher_wake.wait_for(lock, kFlushInterval, [&] { return r.flusher_stop; })) return;
    lock.unlock();
    {
      std::lock_guard recording_lock(r.mutex);
      for_each_writer(r, [](std::unique_ptr<trace::TraceWriter>& w) {
        try {
          w->flush();
        } catch (const std::exception& ex) {
          std::fprintf(stderr, "gpumem: allocation trace stopped: %s\n", ex.what());
          w.reset();
        }
      });
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
  // Its mutex and condition may be held or waited on by that thread, which the child does not have.
  new (&r.flusher_mutex) std::mutex;
  new (&r.flusher_wake) std::condition_variable;
  r.mutex.unlock();
}

// Takes the writers of the trace underway (the lock held), to be closed without it.
std::vector<std::unique_ptr<trace::TraceWriter>> take_writers(Recorder& r) {
  std::vector<std::unique_ptr<trace::TraceWriter>> writers;
  for_each_writer(r, [&](std::unique_ptr<trace::TraceWriter>& w) { writers.push_back(std::move(w)); });
  r.unclaimed.reset();
  r.devices.clear();
  return writers;
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
  std::vector<std::unique_ptr<trace::TraceWriter>> old;
  {
    std::lock_guard lock(r.mutex);
    // The new file first: a path that cannot be written leaves the trace underway running. The same
    // file again (however spelled) starts afresh: the old writers go first, and with them the trace.
    bool same = false;
    for_each_writer(r, [&](std::unique_ptr<trace::TraceWriter>& w) { same |= w->writes(path); });
    if (same) {
      recording = false;
      take_writers(r);  // closes them (a write error they find is reported at close: none to report here)
    }
    auto writer = std::make_unique<trace::TraceWriter>(path, "gpumem recorder", "");
    old = take_writers(r);
    r.path = path;
    r.unclaimed = std::move(writer);
    if (r.unclaimed->redirected())
      std::fprintf(stderr, "gpumem: another process is writing the trace %s; this one (pid %d) writes %s\n", path.c_str(),
                   int(getpid()), r.unclaimed->path().c_str());
    r.start = std::chrono::steady_clock::now();
    recording = true;
  }
  for (auto& w : old) w->close();
  // Outside our mutex: an allocating thread holds the allocator's locks, then takes ours.
  for_each_default_allocator_at([](int device, Allocator& a) {
    name_device(recorder(), device, a);
    a.add_observer(observer_of(device));
  });
  static std::once_flag at_exit;  // the fork handlers first: a fork must never copy a flusher unannounced
  std::call_once(at_exit, [] {
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    std::atexit(stop_at_exit);
  });
  start_flusher(r);
}

std::size_t trace_stop() {
  Recorder& r = recorder();
  std::lock_guard one_at_a_time(r.starting_or_stopping);
  stop_flusher(r);
  for_each_default_allocator_at([](int device, Allocator& a) { a.remove_observer(observer_of(device).get()); });
  std::vector<std::unique_ptr<trace::TraceWriter>> writers;
  {
    std::lock_guard lock(r.mutex);
    recording = false;
    writers = take_writers(r);
  }
  // Outside the lock: closing waits for the writers' queued buffers, and threads still freeing blocks
  // take the lock (to find no writer) meanwhile. Every file is closed; the first error is reported.
  std::size_t n = 0;
  std::optional<trace::TraceError> failed;
  for (auto& w : writers) {
    n += w->events_written();
    try {
      w->close();
    } catch (const trace::TraceError& e) {
      if (!failed) failed = e;
    }
  }
  if (failed) throw *failed;
  return n;
}

void trace_attach(int device, Allocator& allocator) {
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
  name_device(recorder(), device, allocator);
  allocator.add_observer(observer_of(device));
}

}  // namespace gpumem::api
