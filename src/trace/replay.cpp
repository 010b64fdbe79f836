// Replay: the trace is first compiled into a flat list of steps (block index instead of address, the
// release moment already chosen), so the timed loop does nothing but call the allocator.
#include "gpumem/replay.hpp"

#include <chrono>
#include <memory>
#include <vector>

#include "gpumem/allocator.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem::trace {
namespace {

struct Step {
  std::uint64_t size;    // 0 for a release
  std::uint64_t stream;  // the block's allocation stream
  std::uint32_t block;
  std::uint32_t event;   // index in trace.events
  bool alloc;
};

std::vector<Step> compile(const Trace& trace) {
  const Op release = trace.summary.has_free_completed ? Op::free_completed : Op::free;
  std::vector<Step> steps;
  steps.reserve(trace.summary.allocs * 2);
  std::vector<std::uint64_t> block_stream(trace.summary.allocs);
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    if (e.op == Op::alloc) {
      block_stream[e.block] = e.stream;
      steps.push_back({e.size, e.stream, e.block, std::uint32_t(i), true});
    } else if (e.op == release) {
      steps.push_back({0, block_stream[e.block], e.block, std::uint32_t(i), false});
    }
  }
  return steps;
}

std::uint64_t round_up(std::uint64_t v, std::uint64_t step) { return (v + step - 1) / step * step; }

}  // namespace

ReplayResult replay(const Trace& trace, const ReplayOptions& options) {
  const std::vector<Step> steps = compile(trace);
  ReplayResult r;  // before the allocator: its error handler writes here until the allocator is gone
  SimBackendOptions sim;
  sim.capacity = options.capacity;
  sim.granularity = options.page;
  auto backend = std::make_shared<SimBackend>(sim);
  Allocator allocator(backend);
  allocator.set_error_handler([&r](const std::string&) { ++r.invalid_frees; });
  r.events = trace.events.size();
  r.capacity = options.capacity;
  r.page = options.page;
  r.peak_requested = trace.summary.peak_requested;

  std::vector<void*> ptrs(trace.summary.allocs, nullptr);
  const auto start = std::chrono::steady_clock::now();
  for (const Step& s : steps) {
    if (s.alloc) {
      try {
        ptrs[s.block] = allocator.allocate(s.size, s.stream);
      } catch (const OutOfMemoryError&) {
        ++r.ooms;
        if (!r.first_oom) {
          const DeviceStats stats = allocator.stats();
          r.first_oom = ReplayOom{s.event,
                                  trace.events[s.event].line,
                                  s.size,
                                  std::uint64_t(stats.allocated_bytes[kAggregatePool].current),
                                  std::uint64_t(stats.reserved_bytes[kAggregatePool].current),
                                  allocator.largest_free_block(),
                                  options.capacity,
                                  s.stream};
        }
        if (options.stop_at_first_oom) break;
      } catch (const OutOfMemoryError&) {
        throw;
      } catch (const Error& e) {  // a limit of the allocator (streams per device, ...): name the line
        std::string why = e.what();
        if (why.rfind("gpumem: ", 0) == 0) why.erase(0, 8);
        throw TraceError(trace.path, trace.events[s.event].line, "the allocator refused this event: " + why);
      }
    } else if (void* p = ptrs[s.block]) {
      allocator.deallocate(p, s.stream);
      ptrs[s.block] = nullptr;
    }
    ++r.operations;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const DeviceStats stats = allocator.stats();
  r.peak_allocated = std::uint64_t(stats.allocated_bytes[kAggregatePool].peak);
  r.peak_reserved = std::uint64_t(stats.reserved_bytes[kAggregatePool].peak);
  r.ratio = r.peak_requested ? double(r.peak_reserved) / double(r.peak_requested) : 0.0;
  r.calls = backend->call_counts();
  return r;
}

MinCapacityResult find_min_capacity(const Trace& trace, const ProbeObserver& observer, std::uint64_t page) {
  const auto start = std::chrono::steady_clock::now();
  MinCapacityResult out;
  ReplayOptions unconstrained;
  unconstrained.page = page;
  out.unconstrained = replay(trace, unconstrained);
  if (out.unconstrained.ooms) {
    throw OutOfMemoryError("the trace does not replay even with " + format_bytes(kDefaultReplayCapacity) + " of device memory");
  }
  const std::uint64_t limit = trace.summary.peak_requested;
  // Known to fail without a probe: the largest step strictly below the physical limit.
  std::uint64_t lo = limit == 0 ? 0 : (limit - 1) / kCapacityStep * kCapacityStep;
  std::uint64_t hi = std::max(round_up(out.unconstrained.peak_reserved, kCapacityStep), lo + kCapacityStep);
  std::size_t estimate = 1;
  for (std::uint64_t span = (hi - lo) / kCapacityStep; span > 1; span = (span + 1) / 2) ++estimate;

  auto probe = [&](std::uint64_t capacity) {
    ReplayOptions options;
    options.capacity = capacity;
    options.page = page;
    options.stop_at_first_oom = true;
    const ReplayResult r = replay(trace, options);
    CapacityProbe p{++out.probes, std::max(estimate, out.probes), capacity, r.ooms == 0, r.first_oom};
    if (observer) observer(p);
    return p.ok;
  };
  // The top must be verified: an allocator may behave differently once the device is full.
  while (!probe(hi)) {
    lo = hi;
    hi = round_up(hi + std::max(kCapacityStep, hi / 64), kCapacityStep);
    ++estimate;
    if (hi > kDefaultReplayCapacity) throw OutOfMemoryError("no capacity up to " + format_bytes(kDefaultReplayCapacity) + " replays the trace");
  }
  while (hi - lo > kCapacityStep) {
    const std::uint64_t mid = lo + (hi - lo) / kCapacityStep / 2 * kCapacityStep;
    (probe(mid) ? hi : lo) = mid;
  }
  out.capacity = hi;
  out.ratio = limit ? double(hi) / double(limit) : 0.0;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace gpumem::trace
