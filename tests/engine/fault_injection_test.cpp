// Fault injection: the backend fails its Nth fallible call (reserve, create_chunk, map, allocate,
// record_event), for every N over a whole workload, once or from N on. After each failure the allocator
// must match the reference model and its own invariants; at the end, with everything freed and the
// cache emptied, every chunk, mapping, range and event must be back, and on the host backend every
// live block's data must have survived.
#include <random>

#include <gtest/gtest.h>

#include "engine/engine_model.hpp"
#include "gpumem/fault_injection_backend.hpp"
#include "gpumem/host_backend.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem::testing_model {
namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;

enum class Device { sim, sim_plain, host };

struct WorkloadRun {
  std::string failure;  // "" when clean
  std::uint64_t fallible_calls = 0, injected = 0, failed_allocations = 0;
};

struct Leaks {
  std::size_t chunks, mappings, used, events, ranges;
};

Leaks leaks_of(Backend& b) {
  if (auto* h = dynamic_cast<HostBackend*>(&b))
    return {h->live_chunks(), h->live_mappings() + h->live_plain(), h->used_bytes(), h->pending_events(), h->live_ranges()};
  auto& s = dynamic_cast<SimBackend&>(b);
  const BackendCallCounts& n = s.call_counts();
  return {s.live_chunks(), s.live_mappings(), s.used_bytes(), s.pending_events(),
          std::size_t(n.reserves - n.range_releases)};
}

WorkloadRun run_workload(Device device, FaultInjectionOptions faults) {
  WorkloadRun run;
  std::shared_ptr<Backend> inner;
  if (device == Device::host) {
    HostBackendOptions o;
    o.capacity = 256 * kMiB;
    o.granularity = 64 << 10;
    inner = std::make_shared<HostBackend>(o);
  } else {
    SimBackendOptions o;
    o.capacity = 512 * kMiB;
    o.virtual_memory = device == Device::sim;
    inner = std::make_shared<SimBackend>(o);
  }
  auto faulty = std::make_shared<FaultInjectionBackend>(inner, faults);
  const bool host = device == Device::host;
  const std::size_t max_bytes = host ? 2 * kMiB : 48 * kMiB;
  Pattern pattern(host ? max_bytes : 0);
  {
    Allocator alloc(faulty);
    ReferenceModel model(alloc, *inner);  // the model's own events bypass the fault injection
    SizeGenerator sizes(max_bytes, 99);
    std::mt19937_64& rng = sizes.rng();
    std::vector<std::pair<void*, StreamId>> live;
    const StreamId streams[] = {0, 5, 6};
    auto fail = [&](int step, const std::string& why) { run.failure = "step " + std::to_string(step) + ": " + why; };

    for (int step = 0; step < (host ? 100 : 160); ++step) {
      bool failed = false;  // data is checked after every failure (and every 16 steps)
      const unsigned r = unsigned(rng() % 100);
      const StreamId stream = streams[rng() % 3];
      if (r < 55 || live.empty()) {
        const std::size_t bytes = sizes.next();
        void* p = nullptr;
        try {
          p = alloc.allocate(bytes, stream);
        } catch (const OutOfMemoryError&) {
          model.on_oom();
          ++run.failed_allocations;
          failed = true;
        } catch (const BackendError&) {
          ++run.failed_allocations;  // a non-memory device failure passes through as it is
          failed = true;
        } catch (const std::exception& e) {
          return fail(step, std::string("allocate threw an unexpected ") + e.what()), run;
        }
        if (p) {
          if (std::string e = model.on_allocate(p, bytes, stream); !e.empty()) return fail(step, e), run;
          live.emplace_back(p, stream);
          if (host) {
            const ModelBlock& b = model.live().at(reinterpret_cast<DevicePtr>(p));
            pattern.fill(p, b.size, b.id);
          }
        }
      } else if (r < 90) {
        const std::size_t i = rng() % live.size();
        auto [p, s] = live[i];
        live.erase(live.begin() + std::ptrdiff_t(i));
        const StreamId free_on = rng() % 4 == 0 ? streams[rng() % 3] : s;
        if (alloc.try_deallocate(p, free_on) != FreeResult::ok) return fail(step, "a live block did not free"), run;
        model.on_free(p, free_on);
      } else if (r < 96) {
        void* p = live[rng() % live.size()].first;
        const StreamId on = streams[rng() % 3];
        alloc.record_stream(p, on);
        model.on_record_stream(p, on);
      } else if (r < 98) {
        alloc.empty_cache();
        model.on_empty_cache();
      } else {
        alloc.set_limit(alloc.limit() ? 0 : 96 * kMiB);
      }
      if (std::string e = model.check_stats(); !e.empty()) return fail(step, e), run;
      try {
        alloc.check_invariants();
      } catch (const Error& e) {
        return fail(step, std::string("check_invariants: ") + e.what()), run;
      }
      if (host && (failed || step % 16 == 15))
        for (const auto& [addr, b] : model.live())
          if (!pattern.matches(reinterpret_cast<const void*>(addr), b.size, b.id))
            return fail(step, "live block #" + std::to_string(b.id) + " lost its data"), run;
    }
    run.fallible_calls = faulty->fallible_calls();
    run.injected = faulty->injected_failures();

    // The device works again: the allocator must recover, then give everything back.
    faulty->arm(0);
    void* again = nullptr;
    try {
      again = alloc.allocate(3 * kMiB, 0);
    } catch (const std::exception& e) {
      return fail(-1, std::string("no recovery once the device works again: ") + e.what()), run;
    }
    if (std::string e = model.on_allocate(again, 3 * kMiB, 0); !e.empty()) return fail(-1, e), run;
    alloc.deallocate(again, 0);
    model.on_free(again, 0);
    for (auto [p, s] : live) {
      alloc.deallocate(p, s);
      model.on_free(p, s);
    }
    alloc.empty_cache();
    model.on_empty_cache();
    if (std::string e = model.check_stats(); !e.empty()) return fail(-1, e), run;
    const Leaks l = leaks_of(*inner);
    if (l.chunks || l.mappings || l.used)
      return fail(-1, "after empty_cache " + std::to_string(l.chunks) + " chunks, " + std::to_string(l.mappings) +
                          " mappings, " + std::to_string(l.used) + " bytes are still held"), run;
  }
  const Leaks l = leaks_of(*inner);
  if (l.chunks || l.mappings || l.used || l.events || l.ranges)
    run.failure = "after destruction " + std::to_string(l.chunks) + " chunks, " + std::to_string(l.mappings) +
                  " mappings, " + std::to_string(l.ranges) + " ranges, " + std::to_string(l.events) + " events leaked";
  return run;
}

struct Case {
  const char* name;
  Device device;
  FaultKind kind;
  bool persistent;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class FaultInjection : public ::testing::TestWithParam<Case> {};

TEST_P(FaultInjection, EveryFailurePointLeavesTheAllocatorWholeAndLeaksNothing) {
  const Case c = GetParam();
  const WorkloadRun clean = run_workload(c.device, {});
  ASSERT_EQ(clean.failure, "") << "the workload fails without any injected fault";
  ASSERT_GT(clean.fallible_calls, 20u) << "the workload makes too few device calls to test anything";
  RecordProperty("fallible_calls", std::to_string(clean.fallible_calls));
  std::uint64_t injected = 0;
  for (std::uint64_t n = 1; n <= clean.fallible_calls + 1; ++n) {
    FaultInjectionOptions o;
    o.fail_at = n;
    o.persistent = c.persistent;
    o.kind = c.kind;
    const WorkloadRun run = run_workload(c.device, o);
    ASSERT_EQ(run.failure, "") << "with call " << n << " of " << clean.fallible_calls << " failing";
    injected += run.injected;
  }
  EXPECT_GE(injected, clean.fallible_calls) << "not every call could be made to fail";
}

INSTANTIATE_TEST_SUITE_P(
    Backends, FaultInjection,
    ::testing::Values(Case{"sim_once", Device::sim, FaultKind::natural, false},
                      Case{"sim_from_then_on", Device::sim, FaultKind::natural, true},
                      Case{"sim_backend_errors", Device::sim, FaultKind::backend_error, false},
                      Case{"sim_plain_once", Device::sim_plain, FaultKind::natural, false},
                      Case{"host_once", Device::host, FaultKind::natural, false},
                      Case{"host_backend_errors", Device::host, FaultKind::backend_error, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace gpumem::testing_model
