// The random-operation property test's driver: a seeded sequence of allocate / free / record_stream /
// stream completion / empty_cache / reset_peak_stats / set_limit calls against one allocator, every step
// checked against the reference model (engine_model.hpp). On the host backend every live block also
// holds a pattern that is checked after every step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace gpumem::testing_model {

struct PropertyConfig {
  enum class BackendKind { sim, sim_plain, host };
  BackendKind backend = BackendKind::sim;
  std::uint64_t ops = 100000;
  std::size_t slots = 512;              // live blocks at most
  int streams = 4;
  std::size_t max_bytes = std::size_t(64) << 20;
  double large_share = 0.0;             // host: extra share of 1-3 MiB requests (large pool)
  std::size_t large_page = 0;           // sim: Backend::large_page() (0: the 2 MiB granule)
  std::uint64_t seed = 1;
  std::uint64_t invariants_every = 10000;
  bool limits = true;                   // exercise set_limit / set_memory_fraction (OOMs)
  std::uint64_t rare_every = 3000;      // 1 in this many steps is each rare call (empty_cache, limits...)
};

struct PropertyResult {
  std::string failure;  // "" when every step matched the model
  std::uint64_t allocations = 0, frees = 0, ooms = 0, empty_caches = 0, peak_resets = 0;
  std::uint64_t pending_seen = 0;  // frees that had to wait for other streams
  std::size_t max_live = 0;
};

PropertyResult run_property(const PropertyConfig& config);

}  // namespace gpumem::testing_model
