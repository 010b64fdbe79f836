// Reading gpumem-trace files (format documented in shared/traces/README.md; version 1).
//
// A trace is JSON lines, plain or gzip-compressed: line 1 is a header object
// {"format": "gpumem-trace", "version": 1, ...}, every later line one flat event object
// {"t": N, "op": "alloc", "addr": N, "size": N, "stream": N}.
//
// Contract: read_trace() either returns a trace whose events are consistent (every free names a live
// block, every free_completed a freed one, no address handed out twice while live) or throws TraceError
// naming the file and the line. It never crashes on corrupt, truncated or hostile input. Events keep
// their line numbers, and each alloc and its free / free_completed share a `block` index, so that a
// replay needs no address lookups.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpumem/errors.hpp"

namespace gpumem::trace {

enum class Op : std::uint8_t {
  alloc,
  free,
  free_completed,
  segment_alloc,
  segment_free,
  segment_map,
  segment_unmap,
};
const char* op_name(Op op) noexcept;

struct Event {
  std::uint64_t t = 0;
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::uint32_t line = 0;   // 1-based line in the file (the header is line 1)
  std::uint32_t block = 0;  // alloc / free / free_completed: index of the block (0, 1, ... in alloc order)
  Op op = Op::alloc;
};

// Figures the reader derives from the events while it validates them.
struct TraceSummary {
  std::size_t allocs = 0, frees = 0, free_completeds = 0, segment_events = 0;
  // Blocks become reusable at free_completed where the trace has those events, else at free.
  bool has_free_completed = false;
  // Peak of requested bytes allocated and not yet reusable: the physical limit of any allocator.
  std::uint64_t peak_requested = 0;
  std::size_t peak_requested_event = 0;  // index of the event that reached it
  std::uint64_t live_at_end = 0;         // requested bytes never freed while recorded
  // The recording allocator's own device traffic (segment_* events): reserved bytes peak,
  // segment_alloc + segment_map count. Only meaningful when segment_events > 0.
  std::uint64_t recorded_peak_reserved = 0;
  std::size_t recorded_segment_allocs = 0;
};

struct Trace {
  std::string path;
  std::string source, device;  // from the header; empty when absent
  std::vector<Event> events;
  TraceSummary summary;
};

// A trace that cannot be read. what() is one sentence: "FILE: line N: problem."
class TraceError : public Error {
 public:
  TraceError(const std::string& file, std::size_t line, const std::string& problem);
  const std::string& file() const noexcept { return file_; }
  std::size_t line() const noexcept { return line_; }  // 0 when the file could not be opened at all
  const std::string& problem() const noexcept { return problem_; }

 private:
  std::string file_;
  std::size_t line_;
  std::string problem_;
};

// Reads and validates a trace file (plain or gzip). Throws TraceError.
Trace read_trace(const std::string& path);
// Same, from text already in memory; `name` stands for the file in messages.
Trace parse_trace(std::string_view text, const std::string& name);

}  // namespace gpumem::trace

namespace gpumem {

// Parses a size: plain bytes ("1048576"), or a number with a unit: KiB/MiB/GiB/TiB (and K/M/G/T) are
// powers of 1024, KB/MB/GB/TB powers of 1000, B bytes; case-insensitive, fractions allowed ("1.5GiB"),
// rounded down to whole bytes. Throws std::invalid_argument with one sentence for anything else
// (empty, negative, unknown unit, overflow past 2^64-1).
std::uint64_t parse_size(std::string_view text);

}  // namespace gpumem
