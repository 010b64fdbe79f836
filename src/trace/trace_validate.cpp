#include "trace/trace_validate.hpp"

#include <cinttypes>
#include <cstdio>
#include <unordered_map>

namespace gpumem::trace {
namespace {

std::string hex(std::uint64_t addr) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, addr);
  return buf;
}

struct LiveBlock {
  std::uint32_t block;
  std::uint32_t alloc_line;
  std::uint32_t free_line;  // 0 while not freed
  std::uint64_t size;
};

}  // namespace

void validate_trace(Trace& trace) {
  TraceSummary& s = trace.summary;
  for (const Event& e : trace.events) {
    if (e.op == Op::free_completed) {
      s.has_free_completed = true;
      break;
    }
  }
  auto fail = [&](const Event& e, const std::string& problem) { throw TraceError(trace.path, e.line, problem); };

  std::unordered_map<std::uint64_t, LiveBlock> live;
  live.reserve(1024);
  std::unordered_map<std::uint64_t, std::uint32_t> freed_at;  // no free_completed: address -> line of its free
  std::uint64_t requested = 0;
  std::int64_t reserved = 0, reserved_peak = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    Event& e = trace.events[i];
    if (i > 0 && e.t < trace.events[i - 1].t)
      fail(e, "time goes backwards (t " + std::to_string(e.t) + " after t " + std::to_string(trace.events[i - 1].t) +
                  " on line " + std::to_string(trace.events[i - 1].line) + "); events must be in the order they happened");
    switch (e.op) {
      case Op::alloc: {
        if (s.allocs >= UINT32_MAX) fail(e, "the trace has more than 2^32 allocations");
        const auto [it, inserted] = live.try_emplace(e.addr, LiveBlock{std::uint32_t(s.allocs), e.line, 0, e.size});
        if (!inserted) {
          const LiveBlock& b = it->second;
          fail(e, "alloc returns address " + hex(e.addr) + " which is still " +
                      (b.free_line ? "waiting for the free_completed of its free on line " + std::to_string(b.free_line)
                                   : "allocated (alloc on line " + std::to_string(b.alloc_line) + ")"));
        }
        e.block = std::uint32_t(s.allocs++);
        freed_at.erase(e.addr);
        if (__builtin_add_overflow(requested, e.size, &requested)) fail(e, "the live requested bytes overflow 64 bits");
        if (requested > s.peak_requested) {
          s.peak_requested = requested;
          s.peak_requested_event = i;
        }
        break;
      }
      case Op::free: {
        ++s.frees;
        const auto it = live.find(e.addr);
        if (it == live.end()) {
          if (const auto f = freed_at.find(e.addr); f != freed_at.end())
            fail(e, "double free: address " + hex(e.addr) + " was already freed on line " + std::to_string(f->second));
          fail(e, "free of address " + hex(e.addr) + " which is not allocated");
        }
        LiveBlock& b = it->second;
        if (b.free_line) fail(e, "free of address " + hex(e.addr) + " which was already freed on line " + std::to_string(b.free_line));
        if (e.size != b.size)
          fail(e, "free of address " + hex(e.addr) + " gives size " + std::to_string(e.size) + " but it was allocated with size " +
                      std::to_string(b.size) + " on line " + std::to_string(b.alloc_line));
        e.block = b.block;
        if (s.has_free_completed) {
          b.free_line = e.line;
        } else {
          requested -= b.size;
          freed_at[e.addr] = e.line;
          live.erase(it);
        }
        break;
      }
      case Op::free_completed: {
        ++s.free_completeds;
        const auto it = live.find(e.addr);
        if (it == live.end()) fail(e, "free_completed of address " + hex(e.addr) + " which is not allocated");
        const LiveBlock& b = it->second;
        if (!b.free_line) fail(e, "free_completed of address " + hex(e.addr) + " before its free (alloc on line " + std::to_string(b.alloc_line) + ")");
        e.block = b.block;
        requested -= b.size;
        live.erase(it);
        break;
      }
      case Op::segment_alloc:
      case Op::segment_map:
        ++s.segment_events;
        ++s.recorded_segment_allocs;
        if (e.size > INT64_MAX || __builtin_add_overflow(reserved, std::int64_t(e.size), &reserved))
          fail(e, "the segment bytes overflow 63 bits");
        if (reserved > reserved_peak) reserved_peak = reserved;
        break;
      case Op::segment_free:
      case Op::segment_unmap:
        ++s.segment_events;
        if (e.size > INT64_MAX || __builtin_sub_overflow(reserved, std::int64_t(e.size), &reserved))
          fail(e, "the segment bytes overflow 63 bits");
        break;
    }
  }
  s.recorded_peak_reserved = std::uint64_t(reserved_peak);
  s.live_at_end = requested;
}

}  // namespace gpumem::trace
