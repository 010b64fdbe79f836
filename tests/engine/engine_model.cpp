#include "engine/engine_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace gpumem::testing_model {
namespace {

const char* kind_name(int k) { return k == kAggregatePool ? "all" : k == kSmallPool ? "small_pool" : "large_pool"; }

std::string hex(DevicePtr p) {
  std::ostringstream os;
  os << "0x" << std::hex << p;
  return os.str();
}

}  // namespace

ReferenceModel::ReferenceModel(Allocator& allocator, Backend& events) : allocator_(allocator), events_(events) {}

ReferenceModel::~ReferenceModel() {
  for (Pending& p : pending_)
    for (EventHandle e : p.events) events_.release_event(e);
}

void ReferenceModel::account(const ModelBlock& b, bool allocated) {
  const std::int64_t v[kWhich] = {1, std::int64_t(b.size), std::int64_t(b.requested)};
  for (int w = 0; w < kWhich; ++w)
    for (int k : {int(kAggregatePool), b.kind}) {
      if (allocated) totals_[w][k].add(v[w]);
      else totals_[w][k].sub(v[w]);
    }
}

void ReferenceModel::refresh_pending() {
  for (Pending& p : pending_) {
    if (!p.busy) continue;
    bool done = true;
    for (EventHandle e : p.events) done = done && events_.event_done(e);
    if (!done) continue;
    p.busy = false;
    for (EventHandle e : p.events) events_.release_event(e);
    p.events.clear();
    occupied_.erase(p.block.addr);
  }
}

std::string ReferenceModel::check_overlap(const ModelBlock& b) const {
  const DevicePtr end = b.addr + b.size;
  auto next = occupied_.lower_bound(b.addr);
  if (next != occupied_.end() && next->first < end)
    return "block #" + std::to_string(b.id) + " at " + hex(b.addr) + " (" + std::to_string(b.size) +
           " B) overlaps block #" + std::to_string(next->second.second) + " at " + hex(next->first);
  if (next != occupied_.begin()) {
    auto prev = std::prev(next);
    if (prev->second.first > b.addr)
      return "block #" + std::to_string(b.id) + " at " + hex(b.addr) + " overlaps block #" +
             std::to_string(prev->second.second) + " at " + hex(prev->first) + " that ends at " +
             hex(prev->second.first);
  }
  return "";
}

std::string ReferenceModel::on_allocate(void* ptr, std::size_t requested, StreamId stream) {
  if (!ptr) return "allocate(" + std::to_string(requested) + ") returned nullptr";
  refresh_pending();
  ModelBlock b;
  b.id = next_id_++;
  b.addr = reinterpret_cast<DevicePtr>(ptr);
  b.size = allocator_.block_size(ptr);
  b.requested = requested;
  b.stream = stream;
  b.kind = requested <= kSmallRequestLimit ? kSmallPool : kLargePool;
  const std::size_t rounded = (requested + 511) / 512 * 512;
  if (b.addr % 512) return "allocate(" + std::to_string(requested) + ") returned unaligned " + hex(b.addr);
  if (b.size < rounded || b.size % 512)
    return "block_size of a " + std::to_string(requested) + " B request is " + std::to_string(b.size);
  if (live_.count(b.addr)) return "allocate returned live pointer " + hex(b.addr) + " again";
  if (std::string e = check_overlap(b); !e.empty()) return e;
  occupied_.emplace(b.addr, std::make_pair(b.addr + b.size, b.id));
  account(b, true);
  live_.emplace(b.addr, std::move(b));
  return "";
}

std::string ReferenceModel::on_record_stream(void* ptr, StreamId stream) {
  auto it = live_.find(reinterpret_cast<DevicePtr>(ptr));
  if (it == live_.end()) return "model: record_stream on a pointer that is not live";
  ModelBlock& b = it->second;
  if (stream != b.stream && std::find(b.other_streams.begin(), b.other_streams.end(), stream) == b.other_streams.end())
    b.other_streams.push_back(stream);
  return "";
}

std::string ReferenceModel::on_free(void* ptr, StreamId free_stream) {
  auto it = live_.find(reinterpret_cast<DevicePtr>(ptr));
  if (it == live_.end()) return "model: free of a pointer that is not live";
  on_record_stream(ptr, free_stream);  // freeing on another stream uses the block there
  ModelBlock b = std::move(it->second);
  live_.erase(it);
  account(b, false);
  if (b.other_streams.empty()) {
    occupied_.erase(b.addr);
    return "";
  }
  Pending p{std::move(b), {}, true};
  for (StreamId s : p.block.other_streams) p.events.push_back(events_.record_event(s));
  pending_.push_back(std::move(p));
  return "";
}

void ReferenceModel::on_empty_cache() {
  // empty_cache waits for every stream, so every pending block has been returned.
  for (Pending& p : pending_) {
    for (EventHandle e : p.events) events_.release_event(e);
    if (p.busy) occupied_.erase(p.block.addr);
  }
  pending_.clear();
}

void ReferenceModel::on_reset_peaks() {
  for (auto& w : totals_)
    for (Counter& c : w) c.peak = c.current;
}

void ReferenceModel::on_reset_accumulated() {
  for (auto& w : totals_)
    for (Counter& c : w) c.allocated = c.freed = 0;
  ooms_ = 0;
}

std::vector<const ModelBlock*> ReferenceModel::busy_pending() {
  refresh_pending();
  std::vector<const ModelBlock*> out;
  for (const Pending& p : pending_)
    if (p.busy) out.push_back(&p.block);
  return out;
}

std::size_t ReferenceModel::live_bytes() const {
  std::size_t n = 0;
  for (const auto& [addr, b] : live_) n += b.size;
  return n;
}

std::string ReferenceModel::check_stats(bool right_after_reset) {
  refresh_pending();
  const DeviceStats s = allocator_.stats();
  const StatArray* engine[kWhich] = {&s.allocation, &s.allocated_bytes, &s.requested_bytes};
  const char* names[kWhich] = {"allocation", "allocated_bytes", "requested_bytes"};
  for (int w = 0; w < kWhich; ++w)
    for (int k = 0; k < 3; ++k) {
      const Stat& got = (*engine[w])[k];
      const Counter& want = totals_[w][k];
      const std::string name = std::string(names[w]) + "." + kind_name(k);
      if (got.current != want.current)
        return name + ".current is " + std::to_string(got.current) + ", expected " + std::to_string(want.current);
      if (got.allocated != want.allocated || got.freed != want.freed)
        return name + ".allocated/freed are " + std::to_string(got.allocated) + "/" + std::to_string(got.freed) +
               ", expected " + std::to_string(want.allocated) + "/" + std::to_string(want.freed);
      if (got.peak != want.peak)  // exact over all streams together
        return name + ".peak is " + std::to_string(got.peak) + ", expected " + std::to_string(want.peak);
    }

  // Active: live blocks, plus pending ones that are still busy for sure, plus (maybe) those whose
  // streams are done but that the engine has not noticed yet.
  std::int64_t lo[2][3] = {}, hi[2][3] = {};
  for (int k = 0; k < 3; ++k) {
    lo[0][k] = hi[0][k] = totals_[kCount][k].current;
    lo[1][k] = hi[1][k] = totals_[kBytes][k].current;
  }
  for (const Pending& p : pending_)
    for (int k : {int(kAggregatePool), p.block.kind}) {
      hi[0][k] += 1;
      hi[1][k] += std::int64_t(p.block.size);
      if (p.busy) {
        lo[0][k] += 1;
        lo[1][k] += std::int64_t(p.block.size);
      }
    }
  const StatArray* active[2] = {&s.active, &s.active_bytes};
  for (int w = 0; w < 2; ++w)
    for (int k = 0; k < 3; ++k) {
      const Stat& got = (*active[w])[k];
      if (got.current < lo[w][k] || got.current > hi[w][k])
        return std::string(w ? "active_bytes." : "active.") + kind_name(k) + ".current is " +
               std::to_string(got.current) + ", expected between " + std::to_string(lo[w][k]) + " and " +
               std::to_string(hi[w][k]);
      if (got.peak < got.current) return std::string(w ? "active_bytes." : "active.") + kind_name(k) + ".peak < current";
    }
  if (s.num_ooms != std::int64_t(ooms_))
    return "num_ooms is " + std::to_string(s.num_ooms) + ", expected " + std::to_string(ooms_);

  if (right_after_reset) {
    const StatArray* all[] = {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                              &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes};
    for (const StatArray* a : all)
      for (int k = 0; k < 3; ++k)
        if ((*a)[k].peak != (*a)[k].current)
          return std::string("right after reset_peak_stats a ") + kind_name(k) + " peak is " +
                 std::to_string((*a)[k].peak) + " but its current is " + std::to_string((*a)[k].current);
  }
  return "";
}

std::size_t SizeGenerator::next() {
  std::uniform_int_distribution<int> pick(0, 99);
  const int r = pick(rng_);
  const double log_max = std::log(double(max_));
  auto log_uniform = [&] {
    double x = std::exp(std::uniform_real_distribution<double>(0.0, log_max)(rng_));
    return std::clamp<std::size_t>(std::size_t(x), 1, max_);
  };
  if (r < 70) return log_uniform();
  if (r < 80) {
    const int bits = int(std::log2(double(max_)));
    return std::size_t(1) << std::uniform_int_distribution<int>(0, bits)(rng_);
  }
  if (r < 90) return std::max<std::size_t>(512, log_uniform() / 512 * 512);
  static const std::size_t edges[] = {1, 511, 512, 513, (1u << 20) - 1, 1u << 20, (1u << 20) + 1,
                                      (2u << 20) - 1, 2u << 20, (2u << 20) + 1, (2u << 20) + 512};
  std::size_t e = edges[std::uniform_int_distribution<std::size_t>(0, std::size(edges) - 1)(rng_)];
  return e <= max_ ? e : max_;
}

Pattern::Pattern(std::size_t max_block_bytes) : bytes_(max_block_bytes + kWindow) {
  std::mt19937_64 rng(12345);
  for (std::size_t i = 0; i < bytes_.size(); i += 8) {
    std::uint64_t v = rng();
    std::memcpy(&bytes_[i], &v, std::min<std::size_t>(8, bytes_.size() - i));
  }
}

void Pattern::fill(void* dst, std::size_t bytes, std::uint64_t id) const {
  std::memcpy(dst, bytes_.data() + offset(id), bytes);
}

bool Pattern::matches(const void* src, std::size_t bytes, std::uint64_t id) const {
  return std::memcmp(src, bytes_.data() + offset(id), bytes) == 0;
}

}  // namespace gpumem::testing_model
