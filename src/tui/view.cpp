#include "tui/view.hpp"

#include <algorithm>
#include <cstdio>

#include "gpumem/printable.hpp"

namespace gpumem::tui {

const char* sort_name(SortKey k) {
  switch (k) {
    case SortKey::kMemory: return "memory";
    case SortKey::kPid: return "pid";
    case SortKey::kUser: return "user";
    case SortKey::kTime: return "time";
  }
  return "?";
}

std::vector<const ProcRow*> visible_rows(const TopData& data, const ViewState& view) {
  std::vector<const ProcRow*> rows;
  for (const ProcRow& r : data.rows) {
    if (view.gpu_filter && r.gpu != *view.gpu_filter) continue;
    if (!view.user_filter.empty() && (!r.proc || r.proc->user != view.user_filter)) continue;
    rows.push_back(&r);
  }
  auto user = [](const ProcRow* r) { return r->proc ? r->proc->user : std::string("~"); };
  std::stable_sort(rows.begin(), rows.end(), [&](const ProcRow* a, const ProcRow* b) {
    switch (view.sort) {
      case SortKey::kMemory: return a->gpu_bytes.value_or(0) > b->gpu_bytes.value_or(0);
      case SortKey::kPid: return a->pid < b->pid;
      case SortKey::kUser: return user(a) < user(b);
      case SortKey::kTime: return a->age_s.value_or(-1) > b->age_s.value_or(-1);
    }
    return false;
  });
  return rows;
}

namespace {
// Display order; priority decides what a narrow screen drops.
const std::vector<Column> kColumns = {
    {"GPU", 3, 0, true},     {"PID", 7, 0, true},  {"USER", 9, 2, false}, {"T", 3, 6, false},
    {"GPU-MEM", 7, 0, true}, {"%SM", 4, 3, true},  {"ALLOC", 7, 1, true}, {"RESV", 7, 1, true},
    {"PEAK", 7, 5, true},    {"R/A", 5, 7, true},  {"%CPU", 5, 3, true},  {"HOST", 6, 6, true},
    {"TIME", 8, 4, true},
    {"CONTAINER", 12, 8, false}, {"COMMAND", 0, 0, false},
};
constexpr int kMinCommand = 16;
}  // namespace

std::vector<Column> fit_columns(int width) {
  std::vector<Column> cols = kColumns;
  auto used = [&] {
    int w = 0;
    for (const Column& c : cols) w += c.width + 1;
    return w;
  };
  while (used() + kMinCommand > width) {
    auto worst = std::max_element(cols.begin(), cols.end(), [](const Column& a, const Column& b) {
      return a.priority < b.priority;
    });
    if (worst == cols.end() || worst->priority == 0) break;
    cols.erase(worst);
  }
  return cols;
}

std::string short_bytes(long long bytes) {
  // The magnitude as unsigned: -LLONG_MIN does not exist (a driver's 2^63 bytes recursed until the stack
  // ran out).
  const unsigned long long magnitude = bytes < 0 ? 0ull - static_cast<unsigned long long>(bytes) : bytes;
  const char* units = "BKMGTPE";
  double v = static_cast<double>(magnitude);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  const char* sign = bytes < 0 ? "-" : "";
  if (u == 0) std::snprintf(buf, sizeof buf, "%s%lluB", sign, magnitude);
  else if (v < 10) std::snprintf(buf, sizeof buf, "%s%.1f%c", sign, v, units[u]);
  else std::snprintf(buf, sizeof buf, "%s%.0f%c", sign, v, units[u]);
  return buf;
}

std::string short_duration(double s) {
  long t = std::max(0L, static_cast<long>(s));
  char buf[48];
  if (t >= 86400) std::snprintf(buf, sizeof buf, "%ldd%02ldh", t / 86400, t % 86400 / 3600);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t % 3600 / 60, t % 60);
  return buf;
}

std::string command_of(const ProcRow& row) {
  if (row.kind == RowKind::kGone) return "[gone: NVML lists it, no such process]";
  std::string cmd = !row.proc ? "?" : !row.proc->cmdline.empty() ? row.proc->cmdline : "[" + row.proc->comm + "]";
  if (row.kind == RowKind::kNoContext) cmd = "[no context] " + cmd;
  return gpumem::printable(cmd);  // a newline or escape inside an argument (python3 -c "...") stays on its row
}

std::string describe(const ProcRow& row) {
  std::string s = std::to_string(row.pid);
  if (row.proc) s += " " + row.proc->comm + " (" + row.proc->user + ")";
  return s;
}

std::string cell_text(const ProcRow& r, const Column& c) {
  const std::string t = c.title;
  auto bytes = [](const std::optional<long long>& v) { return v ? short_bytes(*v) : std::string("-"); };
  if (t == "GPU") return std::to_string(r.gpu);
  if (t == "PID") return std::to_string(r.pid);
  if (t == "USER") return r.proc ? r.proc->user : "-";
  if (t == "T") return r.type;
  if (t == "GPU-MEM") return r.gpu_bytes ? short_bytes(signed_bytes(*r.gpu_bytes)) : "-";
  if (t == "ALLOC") return bytes(r.alloc_bytes);
  if (t == "RESV") return bytes(r.reserved_bytes);
  if (t == "PEAK") return bytes(r.peak_bytes);
  if (t == "R/A") {
    if (!r.alloc_bytes || !r.reserved_bytes || *r.alloc_bytes <= 0) return "-";
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.2f", double(*r.reserved_bytes) / double(*r.alloc_bytes));
    return buf;
  }
  if (t == "%SM") return r.sm_percent ? std::to_string(*r.sm_percent) : "-";
  if (t == "%CPU") {
    if (!r.cpu_percent) return "-";
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.0f", *r.cpu_percent);
    return buf;
  }
  if (t == "HOST") return r.proc ? short_bytes(signed_bytes(r.proc->rss_bytes)) : "-";
  if (t == "TIME") return r.age_s ? short_duration(*r.age_s) : "-";
  if (t == "CONTAINER") return r.proc && !r.proc->container.empty() ? r.proc->container : "-";
  return command_of(r);
}

}  // namespace gpumem::tui
