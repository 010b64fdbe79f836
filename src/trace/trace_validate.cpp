#include "trace/trace_validate.hpp"

#include <cinttypes>
#include <algorithm>
#include <cstdio>

namespace gpumem::trace {
namespace {

constexpr std::size_t kRememberedFrees = std::size_t(1) << 16;
// No device comes near it (the engine refuses larger requests): a larger size is a corrupt field.
constexpr std::uint64_t kMaxAllocation = std::uint64_t(1) << 50;

std::string hex(std::uint64_t addr) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, addr);
  return buf;
}

}  // namespace

TraceValidator::TraceValidator(const std::string& path, TraceSummary& summary) : path_(path), s_(summary) {
  live_.reserve(1024);
}

void TraceValidator::fail(const Event& e, const std::string& problem) const { throw TraceError(path_, e.line, problem); }

// The block becomes reusable: its bytes leave the live count, its slot is free again.
void TraceValidator::release(std::unordered_map<std::uint64_t, LiveBlock>::iterator it) {
  requested_ -= it->second.size;
  free_slots_.push_back(it->second.block);
  live_.erase(it);
}

void TraceValidator::remember_free(std::uint64_t addr, std::uint32_t line) {
  if (freed_now_.size() >= kRememberedFrees) {
    freed_before_.swap(freed_now_);
    freed_now_.clear();
  }
  freed_now_[addr] = line;
}

const std::uint32_t* TraceValidator::freed_line(std::uint64_t addr) const {
  if (const auto f = freed_now_.find(addr); f != freed_now_.end()) return &f->second;
  if (const auto f = freed_before_.find(addr); f != freed_before_.end()) return &f->second;
  return nullptr;
}

void TraceValidator::add(Event& e) {
  if (s_.events > 0 && e.t < last_t_)
    fail(e, "time goes backwards (t " + std::to_string(e.t) + " after t " + std::to_string(last_t_) + " on line " +
                std::to_string(last_line_) + "); events must be in the order they happened");
  last_t_ = e.t;
  last_line_ = e.line;
  const std::size_t index = s_.events++;
  switch (e.op) {
    case Op::alloc: {
      if (s_.allocs >= UINT32_MAX) fail(e, "the trace has more than 2^32 allocations");
      if (e.size > kMaxAllocation)
        fail(e, "alloc of " + std::to_string(e.size) + " bytes, more than 1 PiB: no device holds that (a corrupt size?)");
      const auto [it, inserted] = live_.try_emplace(e.addr, LiveBlock{0, e.line, 0, e.size});
      if (!inserted) {
        const LiveBlock& b = it->second;
        fail(e, "alloc returns address " + hex(e.addr) + " which is still " +
                    (b.free_line ? "waiting for the free_completed of its free on line " + std::to_string(b.free_line)
                                 : "allocated (alloc on line " + std::to_string(b.alloc_line) + ")"));
      }
      if (free_slots_.empty()) {
        it->second.block = std::uint32_t(s_.peak_live_blocks++);
      } else {
        it->second.block = free_slots_.back();
        free_slots_.pop_back();
      }
      e.block = it->second.block;
      ++s_.allocs;
      freed_now_.erase(e.addr);
      freed_before_.erase(e.addr);
      if (__builtin_add_overflow(requested_, e.size, &requested_)) fail(e, "the live requested bytes overflow 64 bits");
      if (requested_ > s_.peak_requested) {
        s_.peak_requested = requested_;
        s_.peak_requested_event = index;
      }
      break;
    }
    case Op::free: {
      ++s_.frees;
      const auto it = live_.find(e.addr);
      if (it == live_.end()) {
        if (const std::uint32_t* line = freed_line(e.addr))
          fail(e, "double free: address " + hex(e.addr) + " was already freed on line " + std::to_string(*line));
        fail(e, "free of address " + hex(e.addr) + " which is not allocated");
      }
      LiveBlock& b = it->second;
      if (b.free_line) fail(e, "free of address " + hex(e.addr) + " which was already freed on line " + std::to_string(b.free_line));
      if (e.size != b.size)
        fail(e, "free of address " + hex(e.addr) + " gives size " + std::to_string(e.size) + " but it was allocated with size " +
                    std::to_string(b.size) + " on line " + std::to_string(b.alloc_line));
      e.block = b.block;
      if (s_.has_free_completed) {
        b.free_line = e.line;
      } else {
        remember_free(e.addr, e.line);
        release(it);
      }
      break;
    }
    case Op::free_completed: {
      ++s_.free_completeds;
      const auto it = live_.find(e.addr);
      if (it == live_.end()) fail(e, "free_completed of address " + hex(e.addr) + " which is not allocated");
      const LiveBlock& b = it->second;
      if (!b.free_line) fail(e, "free_completed of address " + hex(e.addr) + " before its free (alloc on line " + std::to_string(b.alloc_line) + ")");
      e.block = b.block;
      remember_free(e.addr, b.free_line);  // a free after this is a double free, not a stranger's address
      release(it);
      break;
    }
    case Op::segment_alloc:
    case Op::segment_map:
      ++s_.segment_events;
      ++s_.recorded_segment_allocs;
      if (e.size > INT64_MAX || __builtin_add_overflow(reserved_, std::int64_t(e.size), &reserved_))
        fail(e, "the segment bytes overflow 63 bits");
      if (reserved_ > reserved_peak_) reserved_peak_ = reserved_;
      break;
    case Op::segment_free:
    case Op::segment_unmap:
      ++s_.segment_events;
      if (e.size > INT64_MAX || __builtin_sub_overflow(reserved_, std::int64_t(e.size), &reserved_))
        fail(e, "the segment bytes overflow 63 bits");
      // A trace that gives back more than its segment events reserved began after segments were made
      // (recording started late): they were reserved from the start (see recorded_peak_reserved).
      reserved_low_ = std::min(reserved_low_, reserved_);
      break;
  }
  s_.recorded_peak_reserved = std::uint64_t(reserved_peak_) + (0 - std::uint64_t(reserved_low_));
  s_.live_at_end = requested_;
}

}  // namespace gpumem::trace
