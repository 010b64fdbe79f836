#include "report/history.hpp"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <cstdlib>

#include "api/context_hook.hpp"
#include "api/registry_internal.hpp"
#include "control/server.hpp"
#include "gpumem/memory.hpp"

namespace gpumem::report {
namespace {
thread_local std::vector<Frame> tls_frames;
thread_local bool tls_has_frames = false;

std::atomic<MemoryHistory::FrameSource> frame_source{nullptr};

// Python frames need the GIL. The source is called when this thread holds it (PyGILState_Check), or
// when it is a Python thread that released it around the allocating call (PyTorch's op bindings
// do): the callback then takes the GIL back, as PyTorch's own stack capture does, and this runs before
// any allocator lock is taken. Threads Python does not know (C++ workers) get no frames: a callback
// there would create a thread state and wait for the GIL. Without an interpreter the source is C's.
void call_frame_source() {
  MemoryHistory::FrameSource source = frame_source.load(std::memory_order_relaxed);
  if (!source) return;
  using GilCheck = int (*)();
  using ThisThreadState = void* (*)();
  static const GilCheck gil_check = reinterpret_cast<GilCheck>(dlsym(RTLD_DEFAULT, "PyGILState_Check"));
  static const ThisThreadState thread_state =
      reinterpret_cast<ThisThreadState>(dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState"));
  if (gil_check && !gil_check() && !(thread_state && thread_state())) return;
  source();
}

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

MemoryHistory& process_history() {
  static MemoryHistory* h = new MemoryHistory;  // never destroyed: events may come during exit
  return *h;
}

std::shared_ptr<AllocatorObserver> process_history_handle() {
  static std::shared_ptr<AllocatorObserver> handle(&process_history(), [](AllocatorObserver*) {});
  return handle;
}

void MemoryHistory::set_thread_frames(std::vector<Frame> frames) {
  tls_frames = std::move(frames);
  tls_has_frames = true;
}

void MemoryHistory::start(const HistoryOptions& options, FrameSource source) {
  {
    std::lock_guard lock(mutex_);
    options_ = options;
    recording_ = true;
    for (auto& [device, trace] : traces_)
      while (trace.size() > options_.max_entries) trace.pop_front();
  }
  frame_source.store(source);
  api::context_hook.store(options.stacks && source ? call_frame_source : nullptr);
  // Outside our mutex: allocating threads hold the allocator's locks and then take ours.
  static std::once_flag later_devices;  // devices first used after this start are recorded too
  std::call_once(later_devices, [] {
    on_new_default_allocator([](int, Allocator& a) {
      if (process_history().recording()) a.add_observer(process_history_handle());
    });
  });
  default_allocator(-1);
  for_each_default_allocator([](Allocator& a) { a.add_observer(process_history_handle()); });
  // `gpumem snapshot PID` from outside then gets this history's trace entries and frames too.
  control::set_snapshot_source([] { return process_history().torch_snapshot(); });
}

void MemoryHistory::stop() {
  api::context_hook.store(nullptr);
  for_each_default_allocator([](Allocator& a) { a.remove_observer(&process_history()); });
  std::lock_guard lock(mutex_);
  recording_ = false;
  block_frames_.clear();  // frees are no longer seen: the frames would go stale
}

void MemoryHistory::clear() {
  std::lock_guard lock(mutex_);
  traces_.clear();
}

bool MemoryHistory::recording() const {
  std::lock_guard lock(mutex_);
  return recording_;
}

void MemoryHistory::on_event(const MemoryEvent& e) noexcept {
  try {
    std::vector<Frame> frames;
    if (e.kind == EventKind::alloc && tls_has_frames) {
      frames = std::move(tls_frames);
      tls_frames.clear();
      tls_has_frames = false;
    }
    std::lock_guard lock(mutex_);
    if (!recording_) return;
    if (e.kind == EventKind::alloc && !frames.empty()) block_frames_[e.device][e.addr] = frames;
    else if (e.kind == EventKind::free_completed) block_frames_[e.device].erase(e.addr);
    if (!options_.context || options_.max_entries == 0) return;
    TraceEntry t;
    t.kind = e.kind;
    t.addr = e.addr;
    t.size = (e.kind == EventKind::alloc || e.kind == EventKind::free_requested || e.kind == EventKind::free_completed)
                 ? e.requested
                 : e.size;
    t.stream = e.stream;
    t.time_us = now_us();
    if (e.oom) t.device_free = e.oom->device_free;
    if (e.kind == EventKind::alloc) t.frames = std::move(frames);
    else if (e.kind == EventKind::free_requested || e.kind == EventKind::free_completed) {
      auto& live = block_frames_[e.device];
      if (auto it = live.find(e.addr); it != live.end()) t.frames = it->second;
    }
    auto& trace = traces_[e.device];
    trace.push_back(std::move(t));
    if (trace.size() > options_.max_entries) trace.pop_front();
  } catch (...) {
    // Out of host memory while recording history: the entry is dropped, the allocation goes on.
  }
}

TorchSnapshotInput MemoryHistory::torch_snapshot() const {
  TorchSnapshotInput in;
  // Allocator snapshots first, without our mutex (their locks come before ours everywhere).
  for_each_default_allocator_at([&](int device, Allocator& a) {
    in.devices.push_back(a.snapshot());
    in.devices.back().device = device;
  });
  std::lock_guard lock(mutex_);
  int last = -1;
  for (const auto& [device, trace] : traces_) last = std::max(last, device);
  in.traces.resize(std::size_t(last + 1));
  for (const auto& [device, trace] : traces_) in.traces[std::size_t(device)].assign(trace.begin(), trace.end());
  auto frames = std::make_shared<std::map<int, std::unordered_map<DevicePtr, std::vector<Frame>>>>(block_frames_);
  in.block_frames = [frames](int device, DevicePtr addr) {
    auto d = frames->find(device);
    if (d == frames->end()) return std::vector<Frame>{};
    auto b = d->second.find(addr);
    return b == d->second.end() ? std::vector<Frame>{} : b->second;
  };
  if (const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF")) in.alloc_conf = conf;
  return in;
}

void write_process_snapshot(std::ostream& out, SnapshotFormat format) {
  TorchSnapshotInput in = process_history().torch_snapshot();
  if (format == SnapshotFormat::torch_pickle) write_torch_snapshot(in, out);
  else write_snapshot_json(in.devices, out);
}

}  // namespace gpumem::report
