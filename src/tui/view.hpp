// The process table and text pieces of `gpumem top`, free of the terminal: which rows show in which
// order, which columns fit a width, and the short number formats. Contract: pure functions over
// TopData, so the screen code only places text and the unit tests need no terminal.
#pragma once
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tui/top_data.hpp"

namespace gpumem::tui {

enum class SortKey { kMemory, kPid, kUser, kTime };
const char* sort_name(SortKey k);

struct ViewState {
  SortKey sort = SortKey::kMemory;
  std::string user_filter;             // empty: every user
  std::optional<unsigned> gpu_filter;  // NVML index
  int cursor = 0;                      // index into the visible rows
  int scroll = 0;
  std::set<int> selected;              // PIDs
};

// Rows after filter and sort; memory and time sort largest first.
std::vector<const ProcRow*> visible_rows(const TopData& data, const ViewState& view);

struct Column {
  const char* title;
  int width;     // 0: takes the rest (COMMAND)
  int priority;  // kept first when the screen is narrow (lower is more important)
  bool right;
};
// The columns that fit `width` characters, in display order.
std::vector<Column> fit_columns(int width);
std::string cell_text(const ProcRow& row, const Column& col);

// "12.3G", "512M", "0B": at most 6 characters.
std::string short_bytes(long long bytes);
// A count a driver reports unsigned, for short_bytes: beyond 8 EiB (a broken reading) it shows as 8.0E,
// never as a negative number.
inline long long signed_bytes(unsigned long long bytes) {
  return static_cast<long long>(bytes > 0x7fffffffffffffffull ? 0x7fffffffffffffffull : bytes);
}
// "1:02:03", "4d03h".
std::string short_duration(double seconds);
// The one-line description of a row for confirmations: "4242 python3 (alice)".
std::string describe(const ProcRow& row);
std::string command_of(const ProcRow& row);

}  // namespace gpumem::tui
