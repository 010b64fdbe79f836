#include "engine/property_driver.hpp"

#include <algorithm>
#include <functional>
#include <random>
#include <sstream>
#include <vector>

#include "engine/engine_model.hpp"
#include "gpumem/host_backend.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem::testing_model {
namespace {

struct Setup {
  std::shared_ptr<Backend> backend;
  std::function<void(StreamId)> complete_stream;
  std::function<std::size_t()> device_used;  // bytes the backend has handed out
};

Setup make_backend(const PropertyConfig& c) {
  Setup s;
  if (c.backend == PropertyConfig::BackendKind::host) {
    HostBackendOptions o;
    o.capacity = std::size_t(512) << 20;
    o.granularity = std::size_t(64) << 10;
    o.manual_events = true;
    auto h = std::make_shared<HostBackend>(o);
    s.complete_stream = [h](StreamId st) { h->complete_stream(st); };
    s.device_used = [h] { return h->used_bytes(); };
    s.backend = h;
  } else {
    SimBackendOptions o;
    o.capacity = std::size_t(16) << 30;
    o.virtual_memory = c.backend == PropertyConfig::BackendKind::sim;
    o.large_page = c.large_page;
    o.manual_events = true;
    auto sim = std::make_shared<SimBackend>(o);
    s.complete_stream = [sim](StreamId st) { sim->complete_stream(st); };
    s.device_used = [sim] { return sim->used_bytes(); };
    s.backend = sim;
  }
  return s;
}

// What one step did, formatted only when a check fails.
struct Step {
  std::uint64_t index = 0;
  const char* what = "";
  std::size_t bytes = 0;
  StreamId stream = 0;
  DevicePtr ptr = 0;
  std::string describe() const {
    std::ostringstream os;
    os << "step " << index << " (" << what;
    if (bytes) os << " " << bytes << " B";
    if (ptr) os << " ptr 0x" << std::hex << ptr << std::dec;
    os << " stream " << stream << ")";
    return os.str();
  }
};

}  // namespace

PropertyResult run_property(const PropertyConfig& c) {
  PropertyResult result;
  Setup setup = make_backend(c);
  Allocator allocator(setup.backend);
  ReferenceModel model(allocator, *setup.backend);
  SizeGenerator sizes(c.max_bytes, c.seed);
  std::mt19937_64& rng = sizes.rng();
  const bool host = c.backend == PropertyConfig::BackendKind::host;
  const std::size_t largest = host ? std::max<std::size_t>(c.max_bytes, std::size_t(3) << 20) : 0;
  Pattern pattern(host ? largest : 0);
  std::vector<StreamId> streams;
  for (int i = 0; i < c.streams; ++i) streams.push_back(StreamId(i) * 0x100);
  std::vector<void*> slots(c.slots, nullptr);
  std::vector<StreamId> slot_stream(c.slots, 0);
  bool limited = false;

  auto random_stream = [&] { return streams[rng() % streams.size()]; };
  auto fail = [&](const Step& step, const std::string& why) {
    result.failure = "after " + step.describe() + ": " + why;
  };
  auto verify_patterns = [&]() -> std::string {
    for (const auto& [addr, b] : model.live())
      if (!pattern.matches(reinterpret_cast<const void*>(addr), b.size, b.id))
        return "live block #" + std::to_string(b.id) + " lost its data";
    for (const ModelBlock* b : model.busy_pending())
      if (!pattern.matches(reinterpret_cast<const void*>(b->addr), b->size, b->id))
        return "block #" + std::to_string(b->id) + ", freed but still in use on another stream, was overwritten";
    return "";
  };

  for (std::uint64_t i = 0; i < c.ops; ++i) {
    Step step{i};
    bool after_reset = false;
    // Rare calls (each about once per rare_every steps) first, then the common ones by r.
    const std::uint64_t rare = rng() % c.rare_every;
    const unsigned r = unsigned(rng() % 1000);
    if (rare == 0) {
      step.what = "empty_cache";
      allocator.empty_cache();
      model.on_empty_cache();
      ++result.empty_caches;
      if (model.live().empty()) {
        const std::int64_t reserved = allocator.stats().reserved_bytes[kAggregatePool].current;
        if (reserved != 0) return fail(step, "nothing live, yet " + std::to_string(reserved) + " B stay reserved"), result;
      }
    } else if (rare == 1) {
      step.what = "reset_peak_stats";
      allocator.reset_peak_stats();
      model.on_reset_peaks();
      after_reset = true;
      ++result.peak_resets;
    } else if (rare == 2) {
      step.what = "reset_accumulated_stats";
      allocator.reset_accumulated_stats();
      model.on_reset_accumulated();
    } else if ((rare == 3 || rare == 4) && c.limits) {
      if (limited) {
        step.what = "set_limit(0)";
        allocator.set_limit(0);
        limited = false;
      } else if (rng() % 4 == 0) {
        step.what = "set_memory_fraction";
        allocator.set_memory_fraction(std::uniform_real_distribution<double>(0.005, 0.2)(rng));
        limited = true;
      } else {
        // Somewhere around what is reserved now: some growth fails, some fits.
        const auto reserved = double(allocator.stats().reserved_bytes[kAggregatePool].current);
        step.what = "set_limit";
        step.bytes = std::max(std::size_t(reserved * std::uniform_real_distribution<double>(0.5, 1.1)(rng)) + 1,
                              allocator.backend().granularity());  // below one page is refused
        allocator.set_limit(step.bytes);
        limited = true;
      }
    } else if (r < 40 && !model.live().empty()) {
      // record_stream on some live block
      void* p = slots[rng() % c.slots];
      if (!p) continue;
      step = {i, "record_stream", 0, random_stream(), reinterpret_cast<DevicePtr>(p)};
      allocator.record_stream(p, step.stream);
      if (std::string e = model.on_record_stream(p, step.stream); !e.empty()) return fail(step, e), result;
    } else if (r < 60) {
      step = {i, "complete_stream", 0, random_stream()};
      setup.complete_stream(step.stream);
    } else {
      const std::size_t slot = rng() % c.slots;
      if (void* p = slots[slot]) {
        // Mostly freed on its own stream; sometimes on another (which then uses it until it passes the free).
        const bool elsewhere = rng() % 10 == 0;
        step = {i, "deallocate", 0, elsewhere ? random_stream() : slot_stream[slot], reinterpret_cast<DevicePtr>(p)};
        if (allocator.try_deallocate(p, step.stream) != FreeResult::ok) return fail(step, "a live block did not free"), result;
        const std::size_t busy_before = model.busy_pending().size();
        if (std::string e = model.on_free(p, step.stream); !e.empty()) return fail(step, e), result;
        if (model.busy_pending().size() > busy_before) ++result.pending_seen;
        slots[slot] = nullptr;
        ++result.frees;
      } else {
        std::size_t bytes = sizes.next();
        if (host && std::uniform_real_distribution<double>(0, 1)(rng) < c.large_share)
          bytes = std::size_t(1) << 20 | (rng() % (std::size_t(2) << 20));
        step = {i, "allocate", bytes, random_stream()};
        try {
          p = allocator.allocate(bytes, step.stream);
        } catch (const OutOfMemoryError& e) {
          model.on_oom();
          ++result.ooms;
          const std::string what = e.what();
          if (what.find(format_bytes(bytes)) == std::string::npos)
            return fail(step, "the out-of-memory message does not name the request: " + what), result;
        }
        if (p) {
          if (std::string e = model.on_allocate(p, bytes, step.stream); !e.empty()) return fail(step, e), result;
          step.ptr = reinterpret_cast<DevicePtr>(p);
          slots[slot] = p;
          slot_stream[slot] = step.stream;
          ++result.allocations;
          if (host) {
            const ModelBlock& b = model.live().at(step.ptr);
            pattern.fill(p, b.size, b.id);
          }
        }
      }
    }
    result.max_live = std::max(result.max_live, model.live().size());
    if (std::string e = model.check_stats(after_reset); !e.empty()) return fail(step, e), result;
    if (host)
      if (std::string e = verify_patterns(); !e.empty()) return fail(step, e), result;
    if (c.invariants_every && i % c.invariants_every == 0) {
      try {
        allocator.check_invariants();
      } catch (const Error& e) {
        return fail(step, std::string("check_invariants: ") + e.what()), result;
      }
      const auto reserved = std::size_t(allocator.stats().reserved_bytes[kAggregatePool].current);
      if (reserved != setup.device_used())
        return fail(step, "reserved_bytes (" + std::to_string(reserved) + ") differs from what the device handed out (" +
                              std::to_string(setup.device_used()) + ")"), result;
    }
  }

  // Drain: free everything, release the cache, and nothing may stay behind.
  Step end{c.ops, "final empty_cache"};
  for (std::size_t s = 0; s < c.slots; ++s)
    if (slots[s]) {
      allocator.deallocate(slots[s], slot_stream[s]);
      model.on_free(slots[s], slot_stream[s]);
    }
  allocator.empty_cache();
  model.on_empty_cache();
  if (std::string e = model.check_stats(); !e.empty()) return fail(end, e), result;
  try {
    allocator.check_invariants();
  } catch (const Error& e) {
    return fail(end, std::string("check_invariants: ") + e.what()), result;
  }
  const DeviceStats s = allocator.stats();
  if (s.reserved_bytes[kAggregatePool].current != 0 || setup.device_used() != 0)
    return fail(end, "memory stays reserved after everything was freed and the cache emptied"), result;
  if (s.active[kAggregatePool].current != 0) return fail(end, "blocks stay active after empty_cache"), result;
  return result;
}

}  // namespace gpumem::testing_model
