#include "report/torch_snapshot.hpp"

#include <fstream>
#include <stdexcept>

#include "report/pickle_writer.hpp"

namespace gpumem::report {
namespace {

const char* torch_state(SnapshotBlockState s) {
  switch (s) {
    case SnapshotBlockState::allocated: return "active_allocated";
    case SnapshotBlockState::pending_free: return "active_pending_free";
    default: return "inactive";
  }
}

void write_frames(PickleWriter& w, const std::vector<Frame>& frames) {
  w.begin_list();
  for (const Frame& f : frames) {
    w.begin_dict();
    w.key("filename");
    w.str(f.filename);
    w.key("line");
    w.integer(f.line);
    w.key("name");
    w.str(f.name);
    w.end_dict();
  }
  w.end_list();
}

// PyTorch's segments are contiguous device memory: a gpumem region becomes one segment per run of
// blocks between holes (addresses whose pages were lent elsewhere or unmapped are not memory).
// Calls fn(region, first, end) for each run [first, end) of r.blocks.
template <class Fn>
void for_each_segment(const AllocatorSnapshot& dev, Fn&& fn) {
  for (const SnapshotRegion& r : dev.regions) {
    std::size_t i = 0;
    while (i < r.blocks.size()) {
      if (r.blocks[i].state == SnapshotBlockState::hole) {
        ++i;
        continue;
      }
      std::size_t end = i;
      while (end < r.blocks.size() && r.blocks[end].state != SnapshotBlockState::hole) ++end;
      fn(r, i, end);
      i = end;
    }
  }
}

void write_segments(PickleWriter& w, const TorchSnapshotInput& in, const AllocatorSnapshot& dev) {
  for_each_segment(dev, [&](const SnapshotRegion& r, std::size_t i, std::size_t end) {
    std::size_t total = 0, allocated = 0, active = 0, requested = 0;
    for (std::size_t k = i; k < end; ++k) {
      const SnapshotBlock& b = r.blocks[k];
      total += b.size;
      if (b.state == SnapshotBlockState::allocated) allocated += b.size;
      if (b.state == SnapshotBlockState::allocated || b.state == SnapshotBlockState::pending_free) {
        active += b.size;
        requested += b.requested;
      }
    }
    w.begin_dict();
    w.key("device");
    w.integer(dev.device);
    w.key("address");
    w.unsigned_integer(r.blocks[i].addr);
    w.key("total_size");
    w.unsigned_integer(total);
    w.key("allocated_size");
    w.unsigned_integer(allocated);
    w.key("active_size");
    w.unsigned_integer(active);
    w.key("requested_size");
    w.unsigned_integer(requested);
    w.key("stream");
    w.unsigned_integer(r.stream);
    w.key("segment_type");
    w.str(r.small_pool ? "small" : "large");
    w.key("segment_pool_id");
    w.tuple2_int(0, 0);
    w.key("is_expandable");
    w.boolean(!r.plain);
    w.key("frames");
    write_frames(w, {});
    w.key("blocks");
    w.begin_list();
    for (std::size_t k = i; k < end; ++k) {
      const SnapshotBlock& b = r.blocks[k];
      bool live = b.state == SnapshotBlockState::allocated || b.state == SnapshotBlockState::pending_free;
      w.begin_dict();
      w.key("address");
      w.unsigned_integer(b.addr);
      w.key("size");
      w.unsigned_integer(b.size);
      w.key("requested_size");
      w.unsigned_integer(live ? b.requested : 0);
      w.key("state");
      w.str(torch_state(b.state));
      w.key("frames");
      write_frames(w, live && in.block_frames ? in.block_frames(dev.device, b.addr) : std::vector<Frame>{});
      w.end_dict();
    }
    w.end_list();
    w.end_dict();
  });
}

void write_trace(PickleWriter& w, const std::vector<TraceEntry>& trace) {
  w.begin_list();
  for (const TraceEntry& e : trace) {
    const char* action = torch_action_name(e.kind);
    if (!action) continue;
    w.begin_dict();
    w.key("action");
    w.str(action);
    if (e.kind == EventKind::oom) {
      w.key("device_free");
      w.unsigned_integer(e.device_free);
    } else {
      w.key("addr");
      w.unsigned_integer(e.addr);
    }
    w.key("size");
    w.unsigned_integer(e.size);
    w.key("stream");
    w.unsigned_integer(e.stream);
    w.key("time_us");
    w.integer(e.time_us);
    w.key("compile_context");
    w.str("N/A");
    w.key("user_metadata");
    w.str("");
    w.key("frames");
    write_frames(w, e.frames);
    w.end_dict();
  }
  w.end_list();
}

void write_settings(PickleWriter& w, const TorchSnapshotInput& in) {
  bool expandable = false;
  for (const AllocatorSnapshot& d : in.devices)
    for (const SnapshotRegion& r : d.regions) expandable |= !r.plain;
  w.begin_dict();
  w.key("PYTORCH_CUDA_ALLOC_CONF");
  w.str(in.alloc_conf);
  w.key("max_split_size");
  w.integer(-1);
  w.key("garbage_collection_threshold");
  w.number(0.0);
  w.key("expandable_segments");
  w.boolean(expandable);  // gpumem's VMM regions grow as PyTorch's expandable segments do
  w.key("pinned_num_register_threads");
  w.integer(1);
  w.key("release_lock_on_cudamalloc");
  w.boolean(false);
  w.key("pinned_use_cuda_host_register");
  w.boolean(false);
  w.key("graph_capture_record_stream_reuse");
  w.boolean(false);
  w.key("roundup_power2_divisions");
  w.begin_dict();
  for (int d = 1; d <= 32768; d *= 2) {
    w.key(std::to_string(d));
    w.integer(0);
  }
  w.end_dict();
  w.end_dict();
}

}  // namespace

const char* torch_action_name(EventKind kind) noexcept {
  switch (kind) {
    case EventKind::stitch:
    case EventKind::give_back: return nullptr;
    default: return event_kind_name(kind);
  }
}

SnapshotCounts count_snapshot(const std::vector<AllocatorSnapshot>& devices) {
  SnapshotCounts c;
  for (const AllocatorSnapshot& dev : devices)
    for_each_segment(dev, [&](const SnapshotRegion& r, std::size_t i, std::size_t end) {
      ++c.segments;
      c.blocks += end - i;
      for (std::size_t k = i; k < end; ++k)
        if (r.blocks[k].state == SnapshotBlockState::allocated || r.blocks[k].state == SnapshotBlockState::pending_free)
          ++c.active_blocks;
    });
  return c;
}

void write_torch_snapshot(const TorchSnapshotInput& in, std::ostream& out) {
  PickleWriter w(out);
  w.begin_dict();
  w.key("segments");
  w.begin_list();
  for (const AllocatorSnapshot& dev : in.devices) write_segments(w, in, dev);
  w.end_list();
  // One trace list per device index up to the highest device seen, as PyTorch's list of devices.
  std::size_t n = in.traces.size();
  for (const AllocatorSnapshot& dev : in.devices) n = std::max(n, std::size_t(dev.device) + 1);
  w.key("device_traces");
  w.begin_list();
  static const std::vector<TraceEntry> none;
  for (std::size_t d = 0; d < n; ++d) write_trace(w, d < in.traces.size() ? in.traces[d] : none);
  w.end_list();
  w.key("allocator_settings");
  write_settings(w, in);
  w.key("external_annotations");
  w.begin_list();
  w.end_list();
  w.end_dict();
  w.finish();
  out.flush();
  if (!out) throw std::runtime_error("gpumem: could not write the memory snapshot");
}

void write_torch_snapshot_file(const TorchSnapshotInput& in, const std::string& path) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw std::runtime_error("gpumem: cannot create the snapshot file '" + path + "'");
  try {
    write_torch_snapshot(in, file);
  } catch (const std::runtime_error&) {
    throw std::runtime_error("gpumem: could not write the snapshot file '" + path + "' (disk full?)");
  }
  file.close();
  if (!file) throw std::runtime_error("gpumem: could not write the snapshot file '" + path + "' (disk full?)");
}

}  // namespace gpumem::report
