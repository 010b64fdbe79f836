#include "tui/screen.hpp"

#include <curses.h>

#include <algorithm>
#include <iterator>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace gpumem::tui {

const char* const kKeyHelp =
    "Up/Down  move        Space  select (several)     q  quit\n"
    "M P U T  sort by memory / pid / user / time\n"
    "f  filter by user     g  next GPU filter           h  this help\n"
    "c  clear cache        l  set memory limit (gpumem processes)\n"
    "s  graceful stop      k  kill (TERM, then KILL), as `gpumem kill`\n"
    "Actions act on the selected rows, or on the row under the cursor,\n"
    "after a y/N confirmation; one at a time.";

namespace {

enum Pair { kLive = 1, kCached, kOther, kError, kTitle, kDim };

void put(int y, int x, const std::string& s, int max_width, attr_t attr = 0) {
  if (y >= LINES || x >= COLS || max_width <= 0) return;
  attron(attr);
  mvaddnstr(y, x, s.c_str(), std::min<int>(max_width, COLS - x));
  attroff(attr);
}

// One character cell (a UTF-8 sequence may be several bytes).
void put_cell(int y, int x, const char* s, attr_t attr) {
  if (y >= LINES || x >= COLS) return;
  attron(attr);
  mvaddstr(y, x, s);
  attroff(attr);
}

attr_t color(const ScreenStyle& st, Pair p) { return st.color ? COLOR_PAIR(p) : A_NORMAL; }

std::string mib_text(std::optional<unsigned long long> b) { return b ? short_bytes(signed_bytes(*b)) : "?"; }

template <class T>
std::string num(const std::optional<T>& v, const char* unit) {
  return v ? std::to_string(*v) + unit : std::string("-") ;
}

// Memory as one bar: live tensors / allocator cache / everything else used / free.
void memory_bar(int y, int x, int width, const monitor::GpuSample& g, const TopData& d, const ScreenStyle& st) {
  if (width < 4) return;
  if (!g.memory_total || !*g.memory_total) {
    put(y, x, "[memory unavailable]", width, color(st, kError));
    return;
  }
  const double total = double(*g.memory_total);
  const double free = double(g.memory_free.value_or(0));
  auto find = [](const std::map<unsigned, long long>& m, unsigned k) { auto it = m.find(k); return it == m.end() ? 0.0 : double(it->second); };
  double live = find(d.alloc_live, g.index), cached = std::max(0.0, find(d.alloc_cached, g.index));
  double other = std::max(0.0, total - free - live - cached);
  int inner = width - 2;
  auto cells = [&](double v) { return static_cast<int>(std::lround(v / total * inner)); };
  int n_live = cells(live), n_cached = cells(cached), n_other = std::min(inner - n_live - n_cached, cells(other));
  n_other = std::max(0, n_other);
  put(y, x, "[", 1);
  int cx = x + 1;
  auto seg = [&](int n, const char* uni, char ascii, attr_t attr) {
    for (int i = 0; i < n && cx < x + 1 + inner; ++i, ++cx) put_cell(y, cx, st.unicode ? uni : std::string(1, ascii).c_str(), attr);
  };
  seg(n_live, "\u2588", '#', color(st, kLive));
  seg(n_cached, "\u2593", '=', color(st, kCached));
  seg(n_other, "\u2592", '-', color(st, kOther));
  seg(inner - (cx - x - 1), " ", ' ', 0);
  put(y, x + width - 1, "]", 1);
}

// A one-row history: each cell the highest value over a bucket of samples, covering ~5 minutes.
void sparkline(int y, int x, int width, const std::deque<float>& h, const ScreenStyle& st, attr_t attr) {
  static const char* levels[] = {" ", "\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};
  static const char ascii[] = " .:-=+*#%@";
  if (width <= 0) return;
  const size_t per = std::max<size_t>(1, (300 + width - 1) / width);
  int cx = x + width - 1;
  for (size_t end = h.size(); end > 0 && cx >= x; --cx) {
    size_t begin = end >= per ? end - per : 0;
    float v = NAN;
    for (size_t i = begin; i < end; ++i)
      if (!std::isnan(h[i])) v = std::isnan(v) ? h[i] : std::max(v, h[i]);
    end = begin;
    if (std::isnan(v)) {
      put_cell(y, cx, "?", color(st, kDim));
      continue;
    }
    int lv = static_cast<int>(std::lround(std::clamp(v, 0.f, 1.f) * 8));
    put_cell(y, cx, st.unicode ? levels[lv] : std::string(1, ascii[lv]).c_str(), attr);
  }
}

// The GPU's readings that fit `width`: on a narrow screen the clocks go first, then the P-state, memory
// bandwidth and power (a reading is dropped whole, never cut mid-word).
std::string gpu_info_line(const monitor::GpuSample& g, int width) {
  std::string power = g.power_mw ? std::to_string((*g.power_mw + 500) / 1000) + "W" : "-W";
  if (g.power_limit_mw) power.append("/").append(std::to_string(*g.power_limit_mw / 1000)).append("W");
  const std::string pstate = g.pstate ? std::string("P").append(std::to_string(*g.pstate)) : std::string("P?");
  const std::string parts[] = {num(g.temperature, "C"), "SM " + num(g.util_gpu, "%"), "MEM-BW " + num(g.util_memory, "%"),
                               power, pstate,
                               "clk " + num(g.clock_sm_mhz, "") + "/" + num(g.clock_memory_mhz, "") + " MHz"};
  static constexpr int kDropOrder[] = {5, 4, 2, 3};  // indexes into parts, first dropped first
  bool shown[std::size(parts)];
  std::fill(std::begin(shown), std::end(shown), true);
  auto line = [&] {
    std::string out;
    for (std::size_t i = 0; i < std::size(parts); ++i)
      if (shown[i]) out += (out.empty() ? " " : "  ") + parts[i];
    return out;
  };
  for (int drop : kDropOrder) {
    if (int(line().size()) <= width) break;
    shown[drop] = false;
  }
  return line();
}

std::string title_time() {
  char buf[16];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

}  // namespace

void init_style(const ScreenStyle& st) {
  if (!st.color) return;
  start_color();
  use_default_colors();
  init_pair(kLive, COLOR_GREEN, -1);
  init_pair(kCached, COLOR_YELLOW, -1);
  init_pair(kOther, COLOR_BLUE, -1);
  init_pair(kError, COLOR_RED, -1);
  init_pair(kTitle, COLOR_CYAN, -1);
  init_pair(kDim, COLOR_WHITE, -1);
}

void draw(const TopData& d, ViewState& view, const ScreenStyle& st, const Overlay& ov,
          std::chrono::milliseconds stalled, bool readonly, std::chrono::milliseconds period) {
  erase();
  const int H = LINES, W = COLS;
  const int n = static_cast<int>(d.sample.gpus.size());
  char title[256];
  std::snprintf(title, sizeof title, "gpumem top  %s  %d GPU%s  every %.1fs  sort:%s%s%s", title_time().c_str(), n,
                n == 1 ? "" : "s", period.count() / 1000.0, sort_name(view.sort), readonly ? "  [read-only]" : "",
                view.gpu_filter ? ("  gpu:" + std::to_string(*view.gpu_filter)).c_str() : "");
  std::string t = title;
  if (!view.user_filter.empty()) t += "  user:" + view.user_filter;
  put(0, 0, t, W, A_BOLD | color(st, kTitle));
  if (stalled.count() > 0) {
    std::string s = "  NVML NOT ANSWERING for " + std::to_string(stalled.count() / 1000) + "s (showing the last sample)";
    put(0, std::min<int>(W, t.size()), s, W - t.size(), A_BOLD | color(st, kError));
  }
  int y = 1;
  const bool two_lines = H >= 2 * n + 9;
  auto rows = visible_rows(d, view);
  // GPU lines get what the title, the table's header, a few of its rows and the bottom line leave: with
  // more GPUs than fit, the rest are counted on one line, so that processes stay in view (30 GPUs at
  // 80x24 hid the whole table).
  const int per_gpu = two_lines ? 2 : 1;
  const int gpu_room = std::max(0, H - 3 - std::min(5, std::max(1, static_cast<int>(rows.size()))));
  const int shown = n * per_gpu <= gpu_room ? n : std::max(0, (gpu_room - 1) / per_gpu);
  const bool graphs = shown == n && H >= 3 * n + 10 && W >= 60;
  for (int gi = 0; gi < shown; ++gi) {
    const monitor::GpuSample& g = d.sample.gpus[gi];
    std::string label = std::to_string(g.index) + " " + g.name.value_or("GPU");
    if (!g.error.empty()) {
      put(y, 0, label + "  " + g.error + " (not answering)", W, A_BOLD | color(st, kError));
      y += two_lines ? 2 : 1;
      continue;
    }
    std::string mem = mib_text(g.memory_used) + "/" + mib_text(g.memory_total);
    if (two_lines) {
      put(y, 0, label, W, A_BOLD);
      put(y, std::min<int>(W, label.size()), gpu_info_line(g, W - int(label.size())), W - label.size());
      ++y;
      int bar = std::max(10, W - 44);
      memory_bar(y, 2, bar, g, d, st);
      auto live = d.alloc_live.count(g.index) ? short_bytes(d.alloc_live.at(g.index)) : std::string("-");
      auto cache = d.alloc_cached.count(g.index) ? short_bytes(d.alloc_cached.at(g.index)) : std::string("-");
      put(y, 3 + bar, " " + mem + " live " + live + " cache " + cache, W - 3 - bar);
      ++y;
    } else {
      std::string head = label.substr(0, 18);
      head.resize(19, ' ');
      std::string tail(" ");
      tail.append(num(g.temperature, "C")).append(" ").append(num(g.util_gpu, "%")).append(" ").append(mem);
      int bar = std::max(6, W - 19 - static_cast<int>(tail.size()) - 1);
      put(y, 0, head, W, A_BOLD);
      memory_bar(y, 19, bar, g, d, st);
      put(y, 19 + bar, tail, W - 19 - bar);
      ++y;
    }
  }
  if (shown < n && y < H - 1) {
    put(y++, 0, std::string("+").append(std::to_string(n - shown)).append(" more GPUs: a taller window shows them (g filters the table to one)"),
        W, color(st, kDim));
  }
  if (graphs) {
    int half = (W - 16) / 2;
    for (const monitor::GpuSample& g : d.sample.gpus) {
      auto it = d.history.find(g.index);
      if (it == d.history.end()) continue;
      put(y, 0, std::to_string(g.index) + " mem", 6, color(st, kDim));
      sparkline(y, 6, half, it->second.memory, st, color(st, kLive));
      put(y, 7 + half, "util", 5, color(st, kDim));
      sparkline(y, 12 + half, W - 12 - half, it->second.util, st, color(st, kTitle));
      ++y;
    }
    put(y, 0, "history: last 5 minutes, right is now", W, color(st, kDim));
    ++y;
  }
  // Process table.
  auto cols = fit_columns(W);
  std::string header;
  for (const Column& c : cols) {
    char buf[64];
    if (c.width == 0) std::snprintf(buf, sizeof buf, "%s", c.title);
    else std::snprintf(buf, sizeof buf, c.right ? "%*s " : "%-*s ", c.width, c.title);
    header += buf;
  }
  header.resize(std::max<size_t>(header.size(), W), ' ');
  if (y < H - 1) put(y++, 0, header, W, A_REVERSE);
  const int table_h = std::max(0, H - y - 1);
  view.cursor = std::clamp(view.cursor, 0, std::max(0, static_cast<int>(rows.size()) - 1));
  if (view.cursor < view.scroll) view.scroll = view.cursor;
  if (table_h > 0 && view.cursor >= view.scroll + table_h) view.scroll = view.cursor - table_h + 1;
  for (int i = view.scroll; i < static_cast<int>(rows.size()) && y < H - 1; ++i, ++y) {
    const ProcRow& r = *rows[i];
    std::string line;
    for (const Column& c : cols) {
      std::string v = cell_text(r, c);
      if (c.width == 0) {
        line += v;
        break;
      }
      if (static_cast<int>(v.size()) > c.width) v = v.substr(0, c.width);
      char buf[64];
      std::snprintf(buf, sizeof buf, c.right ? "%*s " : "%-*s ", c.width, v.c_str());
      line += buf;
    }
    attr_t a = 0;
    if (r.kind != RowKind::kContext) a |= color(st, kError);
    if (view.selected.count(r.pid)) a |= A_BOLD, line[0] = '*';
    if (i == view.cursor) a |= A_REVERSE;
    line.resize(std::max<size_t>(line.size(), W), ' ');
    put(y, 0, line, W, a);
  }
  if (rows.empty() && y < H - 1) put(y, 0, "  no processes on the selected GPUs", W, color(st, kDim));
  // Bottom line: a prompt wins over a message, which wins over the key hints.
  std::string bottom = !ov.prompt.empty() ? ov.prompt : !ov.message.empty() ? ov.message
                       : readonly ? "q quit  h help  arrows move  M/P/U/T sort  f user  g gpu  (read-only)"
                                  : "q quit  h help  space select  c clear  l limit  s stop  k kill  M/P/U/T sort  f g filter";
  bottom.resize(std::max<size_t>(bottom.size(), W), ' ');  // over whatever a short window drew there
  put(H - 1, 0, bottom, W, ov.prompt.empty() ? A_NORMAL : A_BOLD);
  if (ov.help) {
    int hy = std::max(1, H / 2 - 4), hx = std::max(0, W / 2 - 40);
    std::string text = kKeyHelp;
    size_t at = 0;
    put(hy++, hx, " gpumem top keys (any key closes) ", 80, A_REVERSE);
    while (at < text.size()) {
      size_t nl = text.find('\n', at);
      std::string line = " " + text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
      line.resize(80, ' ');
      put(hy++, hx, line, 80, A_REVERSE);
      at = nl == std::string::npos ? text.size() : nl + 1;
    }
  }
  refresh();
}

}  // namespace gpumem::tui
