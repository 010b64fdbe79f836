// Checks, one event at a time, that the alloc / free / free_completed events of a trace tell a consistent
// story; gives every block its slot (Event::block) and keeps the TraceSummary. Its memory is proportional
// to the blocks live at once (plus a bounded memory of recent frees, to name double frees as such).
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "gpumem/trace.hpp"

namespace gpumem::trace {

class TraceValidator {
 public:
  // `summary.has_free_completed` must already be known: it decides when a block becomes reusable.
  TraceValidator(const std::string& path, TraceSummary& summary);
  // Checks `e` (its line set), sets its block and brings the summary up to date; throws TraceError at
  // the first bad event.
  void add(Event& e);

 private:
  struct LiveBlock {
    std::uint32_t block;
    std::uint32_t alloc_line;
    std::uint32_t free_line;  // 0 while not freed
    std::uint64_t size;
  };
  [[noreturn]] void fail(const Event& e, const std::string& problem) const;
  void release(std::unordered_map<std::uint64_t, LiveBlock>::iterator it);
  const std::uint32_t* freed_line(std::uint64_t addr) const;
  void remember_free(std::uint64_t addr, std::uint32_t line);  // for "double free" messages

  const std::string& path_;
  TraceSummary& s_;
  std::unordered_map<std::uint64_t, LiveBlock> live_;
  std::vector<std::uint32_t> free_slots_;
  // Without free_completed: address -> line of its free, for the recent frees only (two generations of
  // at most kRememberedFrees each), so that memory stays bounded on a trace of any length.
  std::unordered_map<std::uint64_t, std::uint32_t> freed_now_, freed_before_;
  std::uint64_t requested_ = 0;
  // The segment events' running sum, its highest and lowest values (segments made before the trace began
  // show as a sum below zero).
  std::int64_t reserved_ = 0, reserved_peak_ = 0, reserved_low_ = 0;
  std::uint64_t last_t_ = 0;
  std::uint32_t last_line_ = 0;
};

}  // namespace gpumem::trace
