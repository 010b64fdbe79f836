// Renderers of allocator snapshots and event histories (pure: data in, bytes out).
//  - write_torch_snapshot: the dict torch.cuda.memory._snapshot() returns, as a Python pickle, so
//    torch.cuda.memory._dump_snapshot files, torch.cuda._memory_viz and the memory_viz page read it
//    unchanged: segments (with blocks and their states), device_traces, allocator_settings.
//  - write_snapshot_json: gpumem's own JSON of the same snapshot (regions, holes, mappings, stats).
// Both stream: one device's segments or events at a time, never the whole document in memory twice.
#pragma once
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "gpumem/events.hpp"
#include "gpumem/snapshot.hpp"

namespace gpumem::report {

struct Frame {
  std::string filename;
  int line = 0;
  std::string name;
};

// One entry of a device's history, as PyTorch's TraceEntry.
struct TraceEntry {
  EventKind kind = EventKind::alloc;
  DevicePtr addr = 0;
  std::size_t size = 0;  // requested bytes for alloc / free_*, the range for segment_*, the request for oom
  StreamId stream = 0;
  std::int64_t time_us = 0;
  std::size_t device_free = 0;  // oom only
  std::vector<Frame> frames;
};

// PyTorch names the actions it knows; stitch and give_back have none (nullptr: not in PyTorch's trace).
const char* torch_action_name(EventKind kind) noexcept;

struct TorchSnapshotInput {
  std::vector<AllocatorSnapshot> devices;            // one per device that has an allocator
  std::vector<std::vector<TraceEntry>> traces;       // indexed by device; may be shorter (no history)
  // Frames of the allocation that made the live block at addr; empty when unknown.
  std::function<std::vector<Frame>(int device, DevicePtr addr)> block_frames;
  std::string alloc_conf;                            // PYTORCH_CUDA_ALLOC_CONF as the process sees it
};

// What a snapshot holds as PyTorch counts it: segments (contiguous runs of memory between holes), their
// blocks, and the blocks in use (allocated or pending free). Both renderers describe the same ones.
struct SnapshotCounts {
  std::size_t segments = 0, blocks = 0, active_blocks = 0;
};
SnapshotCounts count_snapshot(const std::vector<AllocatorSnapshot>& devices);

// Writes the pickle to `out`; throws std::runtime_error when the stream fails.
void write_torch_snapshot(const TorchSnapshotInput& input, std::ostream& out);
// Same into a file (created or truncated); throws std::runtime_error with one sentence naming the path.
void write_torch_snapshot_file(const TorchSnapshotInput& input, const std::string& path);

void write_snapshot_json(const std::vector<AllocatorSnapshot>& devices, std::ostream& out);

}  // namespace gpumem::report
