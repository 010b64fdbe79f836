// `gpumem` with no subcommand: a gpustat-like summary, one line per GPU with its processes. Contract:
// render_summary() formats one TopData (colour only when asked: the caller decides from isatty and
// NO_COLOR); summary_json() has the same content for scripts; neither reads anything itself.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "tui/top_data.hpp"

namespace gpumem::tui {

std::string render_summary(const TopData& data, bool color);
nlohmann::ordered_json summary_json(const TopData& data);

struct SummaryOptions {
  bool json = false;
  bool full = false;  // with json: sample_json() (tui/sample_json.hpp), every field in bytes
  double watch_s = 0;  // > 0: repeat in place every watch_s seconds until Ctrl-C
  bool color = false;
};
// Exit status: 0, or 128 + N when signal N ended a watch (130: Ctrl-C, 143: SIGTERM).
int run_summary(const SummaryOptions& options);

}  // namespace gpumem::tui
