// Replay: events are compiled into steps (slot instead of address, the release moment already chosen) a
// batch at a time, so the timed loop does nothing but call the allocator and a streamed trace never sits
// in memory whole.
#include "gpumem/replay.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <new>
#include <vector>

#include "gpumem/allocator.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem::trace {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kBatchSteps = std::size_t(1) << 16;

struct Step {
  std::uint64_t size;    // 0 for a release
  std::uint64_t stream;  // the block's allocation stream
  std::uint32_t block;   // its slot
  std::uint32_t event;   // 0-based index among the trace's events
  std::uint32_t line;
  bool alloc;
};

// Events -> steps. Remembers each slot's allocation stream, which its release needs.
class StepCompiler {
 public:
  explicit StepCompiler(bool has_free_completed) : release_(has_free_completed ? Op::free_completed : Op::free) {}
  void add(const Event& e, std::size_t index, std::vector<Step>& out) {
    if (e.op == Op::alloc) {
      if (e.block >= slot_stream_.size()) slot_stream_.resize(std::size_t(e.block) + 1);
      slot_stream_[e.block] = e.stream;
      out.push_back({e.size, e.stream, e.block, std::uint32_t(index), e.line, true});
    } else if (e.op == release_) {
      out.push_back({0, slot_stream_[e.block], e.block, std::uint32_t(index), e.line, false});
    }
  }

 private:
  Op release_;
  std::vector<std::uint64_t> slot_stream_;
};

// One replay: an allocator on a fresh sim device, fed steps batch by batch.
class Player {
 public:
  Player(const ReplayOptions& options, const std::string& path) : options_(options), path_(path) {
    SimBackendOptions sim;
    sim.capacity = options.capacity;
    sim.granularity = std::min(options.page, kReplayGranule);
    sim.large_page = options.page;
    sim.map_ahead = options.map_ahead;
    backend_ = std::make_shared<SimBackend>(sim);
    allocator_ = std::make_unique<Allocator>(backend_);
    if (options.limit) allocator_->set_limit(options.limit);
    allocator_->set_error_handler([this](const std::string&) { ++r_.invalid_frees; });
  }

  bool stopped() const { return stopped_; }

  void play(const std::vector<Step>& steps) {
    const auto start = Clock::now();
    for (const Step& s : steps) {
      if (s.block >= ptrs_.size()) ptrs_.resize(std::size_t(s.block) + 1, nullptr);
      if (s.alloc) {
        try {
          ptrs_[s.block] = allocator_->allocate(s.size, s.stream);
          if (options_.track_peak_event) note_peak(s);
        } catch (const OutOfMemoryError& e) {
          ptrs_[s.block] = nullptr;
          oom(s, e);
          if (options_.stop_at_first_oom) {
            stopped_ = true;
            break;
          }
        } catch (const Error& e) {  // a limit of the allocator (streams per device, ...): name the line
          std::string why = e.what();
          if (why.rfind("gpumem: ", 0) == 0) why.erase(0, 8);
          throw TraceError(path_, s.line, "the allocator refused this event: " + why);
        }
      } else if (void* p = ptrs_[s.block]) {
        allocator_->deallocate(p, s.stream);
        ptrs_[s.block] = nullptr;
      }
      ++r_.operations;
      if (options_.snapshot_after_event && s.event == *options_.snapshot_after_event) {
        r_.snapshot = allocator_->snapshot();
        stopped_ = true;
        break;
      }
    }
    r_.seconds += std::chrono::duration<double>(Clock::now() - start).count();
  }

  ReplayResult finish(const TraceSummary& summary) {
    r_.events = summary.events;
    r_.capacity = options_.capacity;
    r_.limit = options_.limit;
    r_.page = options_.page;
    r_.peak_requested = summary.peak_requested;
    const DeviceStats stats = allocator_->stats();
    r_.peak_allocated = std::uint64_t(stats.allocated_bytes[kAggregatePool].peak);
    r_.peak_reserved = std::uint64_t(stats.reserved_bytes[kAggregatePool].peak);
    r_.ratio = r_.peak_requested ? double(r_.peak_reserved) / double(r_.peak_requested) : 0.0;
    r_.peak_device = backend_->peak_used_bytes();
    r_.calls = backend_->call_counts();
    return r_;
  }

 private:
  void note_peak(const Step& s) {
    const auto reserved = std::uint64_t(allocator_->stats().reserved_bytes[kAggregatePool].current);
    if (reserved > peak_seen_) peak_seen_ = reserved, r_.peak_event = s.event;
  }

  void oom(const Step& s, const OutOfMemoryError& e) {
    ++r_.ooms;
    if (r_.first_oom) return;
    const DeviceStats stats = allocator_->stats();
    r_.first_oom = ReplayOom{s.event,
                             s.line,
                             s.size,
                             std::uint64_t(stats.allocated_bytes[kAggregatePool].current),
                             std::uint64_t(stats.reserved_bytes[kAggregatePool].current),
                             allocator_->largest_free_block(),
                             options_.capacity,
                             s.stream,
                             e.state()};
  }

  ReplayResult r_;  // first: the allocator's error handler writes here until the allocator is gone
  ReplayOptions options_;
  const std::string& path_;
  std::shared_ptr<SimBackend> backend_;
  std::unique_ptr<Allocator> allocator_;
  std::vector<void*> ptrs_;  // by slot
  bool stopped_ = false;
  std::uint64_t peak_seen_ = 0;  // track_peak_event: the highest reserved bytes after an alloc
};

// The compiled steps of a streamed trace, kept while they fit in the budget (then dropped for good).
struct StepCache {
  std::size_t budget_steps;
  std::vector<Step> steps;
  bool complete = true;

  void append(const std::vector<Step>& batch) {
    if (!complete) return;
    const std::size_t need = steps.size() + batch.size();
    try {
      if (need > budget_steps) throw std::bad_alloc();
      if (need > steps.capacity()) steps.reserve(std::min(budget_steps, std::max(need, 2 * steps.capacity())));
      steps.insert(steps.end(), batch.begin(), batch.end());
    } catch (const std::bad_alloc&) {  // over the budget, or this machine's memory: stream per probe
      complete = false;
      std::vector<Step>().swap(steps);
    }
  }
};

// Streams the trace through one replay from its first event; keeps its steps in `cache` where given. A
// stopped replay (first OOM) reads no further unless `whole` asks for the trace's summary.
ReplayResult stream_replay(TraceReader& reader, TraceInfo& info, const ReplayOptions& options, StepCache* cache,
                           bool whole) {
  info = reader.info();
  StepCompiler compiler(info.summary.has_free_completed);
  Player player(options, info.path);
  std::vector<Step> batch;
  batch.reserve(kBatchSteps);
  Event event;
  for (bool more = true; more;) {
    batch.clear();
    while (batch.size() < kBatchSteps && (more = reader.next(event))) compiler.add(event, reader.info().summary.events - 1, batch);
    if (cache) cache->append(batch);
    if (!player.stopped()) player.play(batch);
    if (player.stopped() && !whole && !cache) break;
  }
  info = reader.info();
  return player.finish(info.summary);
}

std::uint64_t round_up(std::uint64_t v, std::uint64_t step) { return (v + step - 1) / step * step; }

// The bisection, over any way of replaying the trace at a capacity (the unconstrained run already done).
MinCapacityResult search(MinCapacityResult out, std::uint64_t limit, const ProbeObserver& observer,
                         const std::function<ReplayResult(const ReplayOptions&)>& replay_at, std::uint64_t page,
                         Searched searched, Clock::time_point start) {
  if (out.unconstrained.ooms) {
    throw OutOfMemoryError("the trace does not replay even with " + format_bytes(kDefaultReplayCapacity) + " of device memory");
  }
  // Known to fail without a probe: the largest step strictly below the physical limit.
  std::uint64_t lo = limit == 0 ? 0 : (limit - 1) / kCapacityStep * kCapacityStep;
  std::uint64_t hi = std::max(round_up(out.unconstrained.peak_reserved, kCapacityStep), lo + kCapacityStep);
  std::size_t estimate = 1;
  for (std::uint64_t span = (hi - lo) / kCapacityStep; span > 1; span = (span + 1) / 2) ++estimate;

  auto probe = [&](std::uint64_t capacity) {
    ReplayOptions options;
    (searched == Searched::limit ? options.limit : options.capacity) = capacity;
    options.page = page;
    options.stop_at_first_oom = true;
    const ReplayResult r = replay_at(options);
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
  const std::uint64_t top = hi;
  while (hi - lo > kCapacityStep) {
    const std::uint64_t mid = lo + (hi - lo) / kCapacityStep / 2 * kCapacityStep;
    (probe(mid) ? hi : lo) = mid;
  }
  out.capacity = hi;
  out.ratio = limit ? double(hi) / double(limit) : 0.0;
  // Sizes between the minimum and the verified top (see kAboveProbes).
  const std::uint64_t steps = (top - hi) / kCapacityStep;  // sizes above the minimum, the top included
  const std::uint64_t stride = std::max<std::uint64_t>(1, (steps + kAboveProbes - 1) / kAboveProbes);
  estimate = out.probes + (steps ? (steps - 1) / stride : 0);
  out.every_above = hi;
  for (std::uint64_t k = stride; k < steps; k += stride) {
    const std::uint64_t capacity = hi + k * kCapacityStep;
    if (probe(capacity)) continue;
    out.failed_above.push_back(capacity);
    out.every_above = capacity + kCapacityStep;
  }
  out.every_above_ratio = limit ? double(out.every_above) / double(limit) : 0.0;
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

}  // namespace

ReplayResult replay(const Trace& trace, const ReplayOptions& options) {
  StepCompiler compiler(trace.summary.has_free_completed);
  std::vector<Step> steps;
  steps.reserve(trace.summary.allocs * 2);
  for (std::size_t i = 0; i < trace.events.size(); ++i) compiler.add(trace.events[i], i, steps);
  Player player(options, trace.path);
  player.play(steps);
  return player.finish(trace.summary);
}

ReplayResult replay(const std::string& path, TraceInfo& info, const ReplayOptions& options) {
  const auto start = Clock::now();
  info.path = path;
  TraceReader reader(path);
  ReplayResult r = stream_replay(reader, info, options, nullptr, true);
  r.read_seconds = std::chrono::duration<double>(Clock::now() - start).count() - r.seconds;
  return r;
}

ReplayResult replay_with_peak_snapshot(const std::string& path, TraceInfo& info, ReplayOptions options) {
  const auto start = Clock::now();
  info.path = path;
  TraceReader reader(path);
  options.track_peak_event = true;
  options.snapshot_after_event.reset();
  ReplayResult r = stream_replay(reader, info, options, nullptr, true);
  r.read_seconds = std::chrono::duration<double>(Clock::now() - start).count() - r.seconds;
  if (r.peak_reserved) {
    options.track_peak_event = false;
    options.snapshot_after_event = r.peak_event;
    reader.rewind();
    TraceInfo scratch;
    r.snapshot = stream_replay(reader, scratch, options, nullptr, false).snapshot;
  }
  return r;
}

MinCapacityResult find_min_capacity(const Trace& trace, const ProbeObserver& observer, std::uint64_t page,
                                    Searched searched) {
  const auto start = Clock::now();
  MinCapacityResult out;
  ReplayOptions unconstrained;
  unconstrained.page = page;
  out.unconstrained = replay(trace, unconstrained);
  return search(std::move(out), trace.summary.peak_requested, observer,
                [&](const ReplayOptions& o) { return replay(trace, o); }, page, searched, start);
}

MinCapacityResult find_min_capacity(const std::string& path, TraceInfo& info, const ProbeObserver& observer,
                                    std::uint64_t page, std::size_t cache_bytes, Searched searched) {
  const auto start = Clock::now();
  MinCapacityResult out;
  ReplayOptions unconstrained;
  unconstrained.page = page;
  StepCache cache{cache_bytes / sizeof(Step), {}};
  info.path = path;
  TraceReader reader(path);
  out.unconstrained = stream_replay(reader, info, unconstrained, &cache, true);
  out.unconstrained.read_seconds = std::chrono::duration<double>(Clock::now() - start).count() - out.unconstrained.seconds;
  auto replay_at = [&](const ReplayOptions& o) {
    if (!cache.complete) {
      reader.rewind();
      TraceInfo scratch;
      return stream_replay(reader, scratch, o, nullptr, false);
    }
    Player player(o, info.path);
    player.play(cache.steps);
    return player.finish(info.summary);
  };
  return search(std::move(out), info.summary.peak_requested, observer, replay_at, page, searched, start);
}

MinCapacityResult search_min_capacity(const ReplayResult& unconstrained, std::uint64_t peak_live,
                                      const std::function<ReplayResult(const ReplayOptions&)>& replay_at,
                                      const ProbeObserver& observer, std::uint64_t page, Searched searched) {
  MinCapacityResult out;
  out.unconstrained = unconstrained;
  return search(std::move(out), peak_live, observer, replay_at, page, searched, Clock::now());
}

}  // namespace gpumem::trace
