// Reading gpumem-trace files (format documented in shared/traces/README.md; version 1).
//
// A trace is JSON lines, plain or gzip-compressed: line 1 is a header object
// {"format": "gpumem-trace", "version": 1, ...}, every later line one flat event object
// {"t": N, "op": "alloc", "addr": N, "size": N, "stream": N}. Version 2 (what gpumem's recorder writes)
// is version 1 with a last line {"end": true, "events": N}, written when the file is finished, so that a
// trace cut short at a line boundary is known to be.
//
// A trace that ends early (a gzip stream cut short, a last line cut short, a version 2 trace without its
// end record: what a process killed while recording leaves) gives its complete events, and says so in
// TraceInfo::truncated; a trace with no complete event at all is still an error.
//
// Contract: TraceReader hands out the events of a trace one at a time, each checked against those before
// it (time never goes backwards, every free names a live block, every free_completed a freed one, no
// address handed out twice while live), or throws TraceError naming the file and the line of the first
// problem. It never crashes on corrupt, truncated or hostile input, and its memory is proportional to the
// blocks live at once, not to the events: a trace of any length streams through it. Each alloc and its
// free / free_completed share a `block` slot, so that a replay needs no address lookups. read_trace()
// and parse_trace() collect every event in memory (for tests and small traces).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
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
  // alloc / free / free_completed: the block's slot, the same for an alloc and its free / free_completed.
  // A slot is taken at the alloc and given back when the block becomes reusable (its free_completed where
  // the trace has those, else its free); the slot given back last is taken next, so there are never
  // more slots than blocks live at once.
  std::uint32_t block = 0;
  Op op = Op::alloc;
};

// Figures the reader derives from the events while it validates them.
struct TraceSummary {
  std::size_t events = 0;
  std::size_t allocs = 0, frees = 0, free_completeds = 0, segment_events = 0;
  // Blocks become reusable at free_completed where the trace has those events, else at free.
  bool has_free_completed = false;
  // Peak of requested bytes allocated and not yet reusable: the physical limit of any allocator.
  std::uint64_t peak_requested = 0;
  std::size_t peak_requested_event = 0;  // index of the event that reached it
  std::uint64_t live_at_end = 0;         // requested bytes never freed while recorded
  std::size_t peak_live_blocks = 0;      // slots used: the most blocks allocated and not yet reusable
  // The recording allocator's own device traffic (segment_* events): reserved bytes peak,
  // segment_alloc + segment_map count. Only meaningful when segment_events > 0. Segments given back that
  // the trace never showed made (recording began after them) count as reserved from its start.
  std::uint64_t recorded_peak_reserved = 0;
  std::size_t recorded_segment_allocs = 0;
};

// What a trace says about itself: its header, and the figures of its events.
struct TraceInfo {
  std::string path;
  std::string source, device;  // from the header; empty when absent
  int version = 1;             // the header's; version 2 ends with an end record
  TraceSummary summary;
  // The trace ends early: its process did not finish it (killed, crashed, or it is still writing). Its
  // complete events are read; `truncation` says what ends early: a gzip stream cut short, a last line cut
  // short, or (version 2) no end record. Known once next() returned false.
  bool truncated = false;
  std::string truncation;
};

// A trace held in memory.
struct Trace : TraceInfo {
  std::vector<Event> events;
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

// Streams a trace. Every method throws TraceError for bad input (and std::bad_alloc when the blocks live at
// once do not fit in this machine's memory).
class TraceReader {
 public:
  // A file, plain or gzip, or a stream such as a pipe. Reads the header; finds out whether the trace has
  // free_completed events.
  explicit TraceReader(const std::string& path);
  // Text in memory (it must outlive the reader); `name` stands for the file in messages.
  TraceReader(std::string_view text, const std::string& name);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // The next event, checked, with its line and block set; false after the last one, once the checks of
  // the whole trace passed (a trace without events is an error).
  bool next(Event& event);
  // The header from the start; summary figures of the events read so far (all of them after next()
  // returned false; has_free_completed from the start).
  const TraceInfo& info() const;
  // Back to the first event, for another pass (a pipe was copied to a temporary file at the start).
  void rewind();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads and validates a whole trace file (plain or gzip) into memory. Throws TraceError.
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
