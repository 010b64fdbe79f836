// Drawing one frame of `gpumem top` with ncurses (the terminal is already in curses mode). Contract:
// draw() writes the whole frame into curses' buffer and refreshes once, so the terminal receives only
// what changed (no flicker); it adapts to LINES x COLS on every call (resizes need nothing else).
#pragma once
#include <chrono>
#include <string>

#include "tui/top_data.hpp"
#include "tui/view.hpp"

namespace gpumem::tui {

struct ScreenStyle {
  bool color = false;    // terminal has colours and NO_COLOR is not set
  bool unicode = false;  // UTF-8 locale: block characters for bars and graphs
};

struct Overlay {
  bool help = false;
  std::string prompt;   // a confirmation or an input line, shown on the bottom row
  std::string message;  // the last action's outcome
};

void init_style(const ScreenStyle& style);
void draw(const TopData& data, ViewState& view, const ScreenStyle& style, const Overlay& overlay,
          std::chrono::milliseconds stalled, bool readonly, std::chrono::milliseconds period);

// The key help, one entry per line (the `h` screen and --help share it).
extern const char* const kKeyHelp;

}  // namespace gpumem::tui
