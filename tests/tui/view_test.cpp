// The terminal-free parts of `gpumem top`: column fitting, sorting and filtering, short formats.
#include <gtest/gtest.h>

#include <algorithm>

#include "tui/view.hpp"

using namespace gpumem::tui;

TEST(TopView, NarrowScreensDropLowPriorityColumnsKeepCommand) {
  auto wide = fit_columns(200), narrow = fit_columns(80);
  EXPECT_EQ(wide.size(), 15u);
  EXPECT_LT(narrow.size(), wide.size());
  int used = 0;
  for (const auto& c : narrow) used += c.width + 1;
  EXPECT_LE(used + 16, 80);
  EXPECT_STREQ(narrow.back().title, "COMMAND");
  for (const auto& c : narrow) EXPECT_STRNE(c.title, "CONTAINER");
}

TEST(TopView, SortAndFilter) {
  TopData d;
  auto row = [](unsigned gpu, int pid, unsigned long long mib, const char* user, double age) {
    ProcRow r;
    r.gpu = gpu;
    r.pid = pid;
    r.gpu_bytes = mib << 20;
    r.proc = gpumem::monitor::ProcInfo{};
    r.proc->user = user;
    r.age_s = age;
    return r;
  };
  d.rows = {row(0, 30, 100, "bob", 5), row(1, 10, 900, "alice", 50), row(0, 20, 500, "alice", 500)};
  ViewState v;
  auto pids = [&] {
    std::vector<int> out;
    for (auto* r : visible_rows(d, v)) out.push_back(r->pid);
    return out;
  };
  EXPECT_EQ(pids(), (std::vector<int>{10, 20, 30}));
  v.sort = SortKey::kPid;
  EXPECT_EQ(pids(), (std::vector<int>{10, 20, 30}));
  v.sort = SortKey::kTime;
  EXPECT_EQ(pids(), (std::vector<int>{20, 10, 30}));
  v.sort = SortKey::kUser;
  EXPECT_EQ(pids().back(), 30);
  v.user_filter = "alice";
  v.gpu_filter = 0;
  EXPECT_EQ(pids(), (std::vector<int>{20}));
}

TEST(TopView, ShortFormats) {
  EXPECT_EQ(short_bytes(0), "0B");
  EXPECT_EQ(short_bytes(1536), "1.5K");
  EXPECT_EQ(short_bytes(12ll << 30), "12G");
  EXPECT_EQ(short_duration(3723), "1:02:03");
  EXPECT_EQ(short_duration(90000), "1d01h");
  ProcRow gone;
  gone.kind = RowKind::kGone;
  EXPECT_NE(command_of(gone).find("gone"), std::string::npos);
}

// A python3 -c "..." program's newlines (or a hostile escape) must not break the screen row.
TEST(TopView, CommandControlCharactersAreEscaped) {
  ProcRow row;
  row.proc = gpumem::monitor::ProcInfo{};
  row.proc->cmdline = "python3 -c \nimport torch\x1b[2J";
  const std::string shown = command_of(row);
  EXPECT_EQ(shown.find('\n'), std::string::npos);
  EXPECT_EQ(shown.find('\x1b'), std::string::npos);
  EXPECT_NE(shown.find("python3 -c \\nimport torch"), std::string::npos) << shown;
}

TEST(TopView, SmColumnWhereNvmlHasIt) {
  auto wide = fit_columns(200);
  auto sm = std::find_if(wide.begin(), wide.end(), [](const Column& c) { return std::string(c.title) == "%SM"; });
  ASSERT_NE(sm, wide.end());
  ProcRow r;
  EXPECT_EQ(cell_text(r, *sm), "-");  // the driver has no per-process utilization
  r.sm_percent = 0;
  EXPECT_EQ(cell_text(r, *sm), "0");
  r.sm_percent = 87;
  EXPECT_EQ(cell_text(r, *sm), "87");
}
