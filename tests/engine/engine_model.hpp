// A simple reference model of the allocator for the engine's property, fault-injection and stress
// tests: what the program holds (live blocks, blocks freed but still in use on other streams) and the
// statistics that must follow from it. Checks return "" or one sentence naming the first mismatch, so a
// million-step test stops at the first bad step with its context.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gpumem/allocator.hpp"

namespace gpumem::testing_model {

struct ModelBlock {
  std::uint64_t id = 0;
  DevicePtr addr = 0;
  std::size_t size = 0;       // block_size() when it was handed out
  std::size_t requested = 0;
  StreamId stream = 0;
  int kind = kSmallPool;      // pool kind by request size
  std::vector<StreamId> other_streams;
};

class ReferenceModel {
 public:
  // `events` is the backend whose events tell when a pending block's streams have passed its free
  // (the model records its own event right after the engine's, so both complete together).
  ReferenceModel(Allocator& allocator, Backend& events);
  ~ReferenceModel();

  // Each returns "" or what went wrong. Call them right after the allocator call they describe.
  std::string on_allocate(void* ptr, std::size_t requested, StreamId stream);
  std::string on_record_stream(void* ptr, StreamId stream);
  std::string on_free(void* ptr, StreamId free_stream);
  void on_oom() { ++ooms_; }
  void on_empty_cache();
  void on_reset_peaks();
  void on_reset_accumulated();  // also zeroes num_ooms, as PyTorch's resetAccumulatedStats does

  // Compares every modelled statistic with allocator.stats(); `right_after_reset` also demands
  // peak == current for every statistic.
  std::string check_stats(bool right_after_reset = false);

  const std::map<DevicePtr, ModelBlock>& live() const { return live_; }
  // Freed blocks whose other streams may still use them (their memory must stay untouched).
  std::vector<const ModelBlock*> busy_pending();
  std::size_t live_bytes() const;
  std::uint64_t ooms() const { return ooms_; }

 private:
  struct Pending {
    ModelBlock block;
    std::vector<EventHandle> events;
    bool busy = true;  // some event not yet done: the block's range must not be handed out
  };
  struct Counter {  // one statistic of one pool kind
    std::int64_t current = 0, peak = 0, allocated = 0, freed = 0;
    void add(std::int64_t v) {
      current += v;
      allocated += v;
      peak = std::max(peak, current);
    }
    void sub(std::int64_t v) {
      current -= v;
      freed += v;
    }
  };
  enum Which { kCount, kBytes, kRequested, kWhich };
  void account(const ModelBlock& b, bool allocated);
  void refresh_pending();
  std::string check_overlap(const ModelBlock& b) const;

  Allocator& allocator_;
  Backend& events_;
  std::uint64_t next_id_ = 1;
  std::map<DevicePtr, ModelBlock> live_;
  std::vector<Pending> pending_;                          // since the last empty_cache
  std::map<DevicePtr, std::pair<DevicePtr, std::uint64_t>> occupied_;  // addr -> (end, id)
  Counter totals_[kWhich][3];                             // whole allocator, [which][pool kind]
  std::uint64_t ooms_ = 0;
};

// Request sizes: log-uniform between 1 and max_bytes, plus exact powers of two, multiples of 512 and
// the boundaries the engine rounds at (512 B, 1 MiB small/large limit, 2 MiB pages).
class SizeGenerator {
 public:
  SizeGenerator(std::size_t max_bytes, std::uint64_t seed) : max_(max_bytes), rng_(seed) {}
  std::size_t next();
  std::mt19937_64& rng() { return rng_; }

 private:
  std::size_t max_;
  std::mt19937_64 rng_;
};

// A fixed random byte pattern; block `id` holds the slice starting at offset(id).
class Pattern {
 public:
  explicit Pattern(std::size_t max_block_bytes);
  void fill(void* dst, std::size_t bytes, std::uint64_t id) const;
  bool matches(const void* src, std::size_t bytes, std::uint64_t id) const;

 private:
  std::size_t offset(std::uint64_t id) const { return (id * 4099) % kWindow; }
  static constexpr std::size_t kWindow = std::size_t(1) << 16;
  std::vector<unsigned char> bytes_;
};

}  // namespace gpumem::testing_model
