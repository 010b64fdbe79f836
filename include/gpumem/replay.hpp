// Replaying a trace against the engine on the sim backend.
//
// Contract: replay() serves every alloc of the trace with Allocator::allocate(size, stream) and gives each
// block back with deallocate(ptr, stream-of-its-alloc) at the moment it became reusable in the recording:
// its free_completed where the trace has those events, else its free. segment_* events are not replayed
// (they are the recording allocator's own device traffic; see TraceSummary). Only the allocator calls are
// timed (`seconds`); reading and checking the file is `read_seconds`.
// A trace file is streamed (TraceReader): memory stays proportional to the blocks live at once, whatever
// the number of events. An allocation that fails even after the allocator released its cache is counted,
// the first one is described in `first_oom`, and the replay goes on without that block (or stops, with
// stop_at_first_oom).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "gpumem/backend.hpp"
#include "gpumem/snapshot.hpp"
#include "gpumem/trace.hpp"

namespace gpumem::trace {

inline constexpr std::uint64_t kDefaultReplayCapacity = std::uint64_t(1) << 40;  // 1 TiB: effectively unbounded

// The sim device's large page (Backend::large_page) and granule, those of the CUDA backend by default so
// replays predict it: large chunks in 16 MiB pages, the rest in the driver's 2 MiB granules. A smaller
// page makes it the granule too.
inline constexpr std::uint64_t kDefaultReplayPage = std::uint64_t(16) << 20;
inline constexpr std::uint64_t kReplayGranule = std::uint64_t(2) << 20;

struct ReplayOptions {
  std::uint64_t capacity = kDefaultReplayCapacity;  // the sim device's physical memory
  std::uint64_t page = kDefaultReplayPage;          // a power of two
  bool stop_at_first_oom = false;
  bool map_ahead = false;  // the sim device makes pages ahead as the CUDA backend does (counted only)
  // The allocator's own cap on reserved bytes (as `gpumem run --limit`), on a device of `capacity`; 0: none.
  // Not the same as a device that small: the allocator knows its limit before asking the device, and its
  // address space is sized by the device.
  std::uint64_t limit = 0;
  // Where the excess at the peak sits (gpumem replay --peak-breakdown): with track_peak_event the result
  // names the alloc event after which reserved bytes were highest (the first such); a replay with
  // snapshot_after_event stops right after that event and keeps the allocator's snapshot of that moment.
  bool track_peak_event = false;
  std::optional<std::size_t> snapshot_after_event;
};

struct ReplayOom {
  std::size_t event_index = 0;  // 0-based among the trace's events
  std::uint32_t line = 0;       // line in the trace file
  std::uint64_t requested = 0, allocated = 0, reserved = 0, largest_free = 0, capacity = 0;
  std::uint64_t stream = 0;
  OutOfMemoryError::State state;  // the allocator's own account (explain_out_of_memory renders it)
};

struct ReplayResult {
  std::size_t events = 0;          // events in the trace
  std::size_t operations = 0;      // allocate + deallocate calls made
  std::uint64_t capacity = 0;
  std::uint64_t limit = 0;
  std::uint64_t page = 0;
  std::uint64_t peak_requested = 0;  // from the trace: the physical limit
  std::uint64_t peak_allocated = 0;  // allocator's allocated_bytes peak (requests rounded up)
  std::uint64_t peak_reserved = 0;   // allocator's reserved_bytes peak
  std::uint64_t peak_device = 0;     // the sim device's most memory taken at once: reserved plus pages made ahead
  double ratio = 0;                  // peak_reserved / peak_requested
  BackendCallCounts calls;           // everything the allocator asked of the sim device
  std::size_t ooms = 0;
  std::optional<ReplayOom> first_oom;
  std::size_t invalid_frees = 0;     // engine-reported invalid frees (a bug if ever non-zero)
  std::size_t peak_event = 0;        // with track_peak_event: 0-based index of the alloc that reached the peak
  std::optional<AllocatorSnapshot> snapshot;  // with snapshot_after_event (if the replay got that far)
  double seconds = 0;                // the replay loop only
  double read_seconds = 0;           // reading, checking and compiling the trace file (streamed replays)
  double ns_per_event() const { return events ? seconds * 1e9 / double(events) : 0; }
  // The time the program's thread would spend in those driver calls on an H100, estimated from each call's
  // cost per 2 MiB page there (bench/gpu/vmm_cost.cu, 2026-11-28: create 12.7 us, map 0.9, access 30.0
  // (per page, even in one call over a run), unmap 21.9, release 14.5; 16 MiB pages cost a little less).
  // Pages made ahead on the CUDA backend's own thread and then used count as free (replays with map-ahead
  // counting only). For comparing engine settings without a GPU: a model, not a measurement.
  double estimated_driver_ms() const {
    const std::uint64_t ahead_used = calls.ahead_pages - std::min(calls.ahead_pages, calls.ahead_unused);
    const auto on_thread = [&](std::uint64_t n) { return double(n - std::min(n, ahead_used)); };
    return (on_thread(calls.driver_creates) * 12.7 + on_thread(calls.driver_maps) * 30.9 +
            double(calls.driver_unmaps) * 21.9 + double(calls.driver_releases) * 14.5) / 1000.0;
  }
};

ReplayResult replay(const Trace& trace, const ReplayOptions& options = {});
// Streams the file through one replay; `info` gets the header and, once the call returns, the summary.
// Throws TraceError for bad input, wherever in the file it lies.
ReplayResult replay(const std::string& path, TraceInfo& info, const ReplayOptions& options = {});
// The same, then the file again up to the alloc that reached the peak reserved bytes: the result's
// `snapshot` is the allocator at that moment (track_peak_event and snapshot_after_event are set here).
// The file is opened once, so a pipe works too (TraceFile copies it).
ReplayResult replay_with_peak_snapshot(const std::string& path, TraceInfo& info, ReplayOptions options = {});

// Smallest capacity (a multiple of 2 MiB) at which the whole trace replays without OOM: bisection between
// the physical limit (peak_requested) and the unconstrained run's peak reserved; every answer is a
// capacity that was actually replayed successfully, and one 2 MiB less failed (or lies below the limit).
// From a file, the first replay streams it and keeps the compiled steps (32 bytes per alloc and per
// release) for the probes while they fit in `cache_bytes`; a larger trace is streamed again per probe.
struct CapacityProbe {
  std::size_t number = 0;      // 1-based
  std::size_t estimated_total = 0;
  std::uint64_t capacity = 0;
  bool ok = false;
  std::optional<ReplayOom> oom;  // where it failed
};
// The bisection assumes that more memory never hurts; it can (where stitching's holes fill the address
// range and growth moves on decides the layout). So sizes between the minimum and the verified top are
// probed too, at most kAboveProbes of them, spread evenly: `every_above` is the smallest size from which
// every probed size replays (== capacity when none failed), `failed_above` the sizes that did not.
inline constexpr std::size_t kAboveProbes = 8;
struct MinCapacityResult {
  std::uint64_t capacity = 0;
  double ratio = 0;  // capacity / peak_requested
  std::uint64_t every_above = 0;
  double every_above_ratio = 0;
  std::vector<std::uint64_t> failed_above;
  std::size_t probes = 0;
  double seconds = 0;
  ReplayResult unconstrained;  // the replay at the default capacity the search started from
};
inline constexpr std::uint64_t kCapacityStep = std::uint64_t(2) << 20;
// What the search sizes: the device (a capacity), or gpumem's own limit on an unbounded device (the
// smallest `gpumem run --limit` the program fits under).
enum class Searched { capacity, limit };
using ProbeObserver = std::function<void(const CapacityProbe&)>;
MinCapacityResult find_min_capacity(const Trace& trace, const ProbeObserver& observer = {},
                                    std::uint64_t page = kDefaultReplayPage, Searched searched = Searched::capacity);
// The search itself over any replay at a capacity or limit (a test's can fail where it chooses):
// `unconstrained` is the replay without either, `peak_live` the trace's peak live bytes.
MinCapacityResult search_min_capacity(const ReplayResult& unconstrained, std::uint64_t peak_live,
                                      const std::function<ReplayResult(const ReplayOptions&)>& replay_at,
                                      const ProbeObserver& observer = {}, std::uint64_t page = kDefaultReplayPage,
                                      Searched searched = Searched::capacity);
inline constexpr std::size_t kDefaultStepCacheBytes = std::size_t(128) << 20;
MinCapacityResult find_min_capacity(const std::string& path, TraceInfo& info, const ProbeObserver& observer = {},
                                    std::uint64_t page = kDefaultReplayPage,
                                    std::size_t cache_bytes = kDefaultStepCacheBytes,
                                    Searched searched = Searched::capacity);

}  // namespace gpumem::trace
