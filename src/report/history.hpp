// Memory history (torch.cuda.memory._record_memory_history): an observer of the default allocators
// that keeps the last max_entries events per device, with the caller's frames when asked, and the
// frames of every live block for snapshots. One per process (process_history()).
// Frames come from a FrameSource called on the allocating thread before the allocation, outside the
// allocator's locks (api/context_hook.hpp); it hands them over with set_thread_frames().
#pragma once
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumem/allocator.hpp"
#include "report/torch_snapshot.hpp"

namespace gpumem::report {

struct HistoryOptions {
  std::size_t max_entries = 0;  // 0: no trace entries are kept (only block frames); PyTorch's default is large
  bool context = true;          // record events at all ("state" only keeps block frames)
  bool stacks = false;          // capture frames through the frame source
};

class MemoryHistory final : public AllocatorObserver {
 public:
  using FrameSource = void (*)();

  // Observes every default allocator that exists, and the current device's (made if needed).
  void start(const HistoryOptions& options, FrameSource source);
  void stop();
  void clear();
  bool recording() const;

  // Called by the frame source on the allocating thread: frames for that thread's next event.
  static void set_thread_frames(std::vector<Frame> frames);

  void on_event(const MemoryEvent& e) noexcept override;

  // A snapshot of every default allocator plus this history, in PyTorch's format.
  TorchSnapshotInput torch_snapshot() const;

 private:
  mutable std::mutex mutex_;
  HistoryOptions options_;
  bool recording_ = false;
  std::map<int, std::deque<TraceEntry>> traces_;
  std::map<int, std::unordered_map<DevicePtr, std::vector<Frame>>> block_frames_;
};

MemoryHistory& process_history();
std::shared_ptr<AllocatorObserver> process_history_handle();

// This process's snapshot (every default allocator, plus the history if any), for the control channel's
// `gpumem snapshot PID -o FILE`: PyTorch's pickle or gpumem's JSON, streamed to `out`.
enum class SnapshotFormat { torch_pickle, gpumem_json };
void write_process_snapshot(std::ostream& out, SnapshotFormat format);

}  // namespace gpumem::report
