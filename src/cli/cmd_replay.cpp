// gpumem replay TRACE [--capacity SIZE] [--limit SIZE] [--json] [--min-capacity | --min-limit | --peak-breakdown]: thin CLI over gpumem/replay.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <new>
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "gpumem/limits.hpp"
#include "gpumem/printable.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"
#include "report/excess.hpp"

namespace gpumem::cli {
namespace {

using trace::ReplayOom;
using trace::ReplayResult;
using trace::TraceInfo;

std::string bytes(std::uint64_t n) { return grouped(n) + " (" + format_bytes(n) + ")"; }
std::string milliseconds(double s) { return fmt::format("{:.1f} ms", s * 1e3); }

// The one OOM explanation (gpumem/errors.hpp), placed in the trace.
std::string oom_sentence(const ReplayOom& o) {
  return fmt::format("out of memory at event {} (line {}): {}", grouped(o.event_index), o.line,
                     explain_out_of_memory(o.state));
}

nlohmann::json oom_json(const ReplayOom& o) {
  return {{"event", o.event_index}, {"line", o.line},         {"requested", o.requested},
          {"stream", o.stream},     {"allocated", o.allocated}, {"reserved", o.reserved},
          {"largest_free", o.largest_free}, {"capacity", o.capacity}};
}

nlohmann::json to_json(const TraceInfo& t, const ReplayResult& r) {
  const auto& s = t.summary;
  nlohmann::json j = {
      {"trace", t.path},
      {"events", r.events},
      {"peak_requested", r.peak_requested},
      {"peak_reserved", r.peak_reserved},
      {"ratio", r.ratio},
      {"device_calls", r.calls.device_calls()},
      {"creates", r.calls.creates},
      {"maps", r.calls.maps},
      {"unmaps", r.calls.unmaps},
      {"chunk_releases", r.calls.chunk_releases},
      {"plain_allocs", r.calls.plain_allocs},
      {"plain_frees", r.calls.plain_frees},
      {"driver_calls", r.calls.driver_calls()},
      {"access_sets", r.calls.access_sets},
      {"driver_creates", r.calls.driver_creates},
      {"driver_maps", r.calls.driver_maps},
      {"driver_unmaps", r.calls.driver_unmaps},
      {"driver_releases", r.calls.driver_releases},
      {"driver_ms_estimate", r.estimated_driver_ms()},
      {"ahead_pages", r.calls.ahead_pages},
      {"ahead_unused", r.calls.ahead_unused},
      {"peak_device", r.peak_device},
      {"pytorch_segment_allocs", s.recorded_segment_allocs},
      {"peak_allocated", r.peak_allocated},
      {"ooms", r.ooms},
      {"capacity", r.capacity},
      {"limit", r.limit},
      {"page", r.page},
      {"seconds", r.seconds},
      {"ns_per_event", r.ns_per_event()},
      {"parse_seconds", r.read_seconds},
      {"allocs", s.allocs},
      {"frees", s.frees},
      {"free_completed", s.free_completeds},
  };
  if (r.first_oom) j["oom"] = oom_json(*r.first_oom);
  if (t.truncated) {  // only then: the output of a whole trace is as it was
    j["truncated"] = true;
    j["truncation"] = t.truncation;
  }
  if (s.segment_events) {
    j["pytorch"] = {{"peak_reserved", s.recorded_peak_reserved},
                    {"ratio", s.peak_requested ? double(s.recorded_peak_reserved) / double(s.peak_requested) : 0.0},
                    {"segment_allocs", s.recorded_segment_allocs}};
  }
  return j;
}

void print_table(const TraceInfo& t, const ReplayResult& r) {
  const auto& s = t.summary;
  std::printf("gpumem replay %s\n", printable(t.path).c_str());
  if (!t.source.empty() || !t.device.empty())
    std::printf("  recorded by %s on %s\n", t.source.empty() ? "?" : printable(t.source).c_str(),
                t.device.empty() ? "?" : printable(t.device).c_str());
  std::printf("  %s events: %s alloc, %s free, %s free_completed, %s segment_*; blocks reusable at %s\n",
              grouped(r.events).c_str(), grouped(s.allocs).c_str(), grouped(s.frees).c_str(), grouped(s.free_completeds).c_str(),
              grouped(s.segment_events).c_str(), s.has_free_completed ? "free_completed" : "free");
  std::printf("  sim device: %s%s, %s pages%s\n\n", format_bytes(r.capacity).c_str(),
              r.capacity == trace::kDefaultReplayCapacity ? " (default: effectively unbounded)" : "",
              format_bytes(r.page).c_str(), r.limit ? (", gpumem's limit " + format_bytes(r.limit)).c_str() : "");
  const bool pt = s.segment_events > 0;
  // Two columns: gpumem's figures, and PyTorch's beside those it has (the column as wide as the widest).
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> rows;
  auto row = [&](const std::string& what, const std::string& ours, const std::string& theirs) {
    rows.push_back({what, {ours, pt ? theirs : ""}});
  };
  row("", "gpumem", "PyTorch (recorded)");
  row("peak live requested", bytes(r.peak_requested), "the physical limit");
  row("peak reserved", bytes(r.peak_reserved), bytes(s.recorded_peak_reserved));
  row("reserved / live", fmt::format("{:.4f}", r.ratio),
      fmt::format("{:.4f}", s.peak_requested ? double(s.recorded_peak_reserved) / double(s.peak_requested) : 0.0));
  row("device calls", fmt::format("{} ({} creates, {} maps, {} unmaps)", grouped(r.calls.device_calls()),
                                  grouped(r.calls.creates), grouped(r.calls.maps), grouped(r.calls.unmaps)),
      fmt::format("{} segment allocations", s.recorded_segment_allocs));
  // Every kind the total counts, so that the parts add up to it.
  const std::uint64_t plain = r.calls.plain_allocs + r.calls.plain_frees;
  row("driver calls",
      fmt::format("{} ({} page creates, {} page maps, {} unmaps, {} releases, {} access-settings{}) as CUDA would make them",
                  grouped(r.calls.driver_calls()), grouped(r.calls.driver_creates), grouped(r.calls.driver_maps),
                  grouped(r.calls.driver_unmaps), grouped(r.calls.driver_releases), grouped(r.calls.access_sets),
                  plain ? ", " + grouped(plain) + " segment allocations and frees" : std::string()),
      "");
  row("driver time (est.)",
      fmt::format("{:.1f} ms on the program's thread at an H100's per-page costs{}", r.estimated_driver_ms(),
                  r.calls.ahead_pages ? " (pages made ahead and used: free)" : ""),
      "");
  if (r.calls.ahead_pages)
    row("made ahead", fmt::format("{} pages, {} unmapped again unused, on the CUDA backend's own thread",
                                  grouped(r.calls.ahead_pages), grouped(r.calls.ahead_unused)),
        "");
  if (r.calls.ahead_pages)
    row("peak device use", fmt::format("{} ({:.4f} of peak live): reserved plus pages made ahead", bytes(r.peak_device),
                                       r.peak_requested ? double(r.peak_device) / double(r.peak_requested) : 0.0),
        "");
  row("OOMs", grouped(r.ooms), "");
  row("parse", milliseconds(r.read_seconds), "");
  row("replay", fmt::format("{}, {:.0f} ns/event ({:.1f} M events/s)", milliseconds(r.seconds), r.ns_per_event(),
                            r.seconds > 0 ? double(r.events) / r.seconds / 1e6 : 0.0),
      "");
  std::size_t width = 46;
  for (const auto& [what, cells] : rows)
    if (!cells.second.empty()) width = std::max(width, cells.first.size() + 1);
  for (const auto& [what, cells] : rows) {
    std::string line = fmt::format("  {:<22} {:<{}} {}", what, cells.first, width, cells.second);
    while (line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
  }
  if (r.invalid_frees) std::printf("  warning: the allocator reported %zu invalid frees (an engine bug)\n", r.invalid_frees);
}

struct ReplayArgs {
  std::string path;
  std::string capacity;
  std::string page;
  std::string limit;
  CLI::Option* capacity_option = nullptr;  // given at all (an empty value is an error, not the default)
  CLI::Option* limit_option = nullptr;
  CLI::Option* page_option = nullptr;
  bool json = false;
  bool min_capacity = false;
  bool min_limit = false;
  bool map_ahead = false;
  bool peak_breakdown = false;
  bool strict = false;
};

// A trace that ends early (its process was killed while recording) replays the events it has, with one
// line on stderr; --strict refuses it. True when the replay's figures may be printed.
bool accept_ending(const ReplayArgs& args, const TraceInfo& t) {
  if (!t.truncated) return true;
  const std::string what = fmt::format("{}: the trace ends early after {} event{}: the recording process did not finish it ({})",
                                       printable(t.path), grouped(t.summary.events), t.summary.events == 1 ? "" : "s",
                                       t.truncation);
  if (args.strict) {
    std::fprintf(stderr, "gpumem replay: %s; --strict refuses it\n", what.c_str());
    return false;
  }
  std::fprintf(stderr, "gpumem replay: warning: %s\n", what.c_str());
  return true;
}

// The sim device models at most this much memory: beyond it sizes stop being realistic and sums overflow.
// The sim tracks a device's pages one by one: one 1 PiB allocation took 24 GB of host memory before the
// kernel killed the replay; 16 TiB (over 50 times the largest GPU's memory) stays under 1 GB.
constexpr std::uint64_t kMaxReplayCapacity = std::uint64_t(16) << 40;

// --min-capacity (the device) or --min-limit (gpumem's limit on an unbounded device): JSON keys min_capacity*
// or min_limit*.
int find_min_capacity(const ReplayArgs& args, TraceInfo& t, std::uint64_t page) {
  const bool limit = args.min_limit;
  const char* what = limit ? "limit" : "capacity";
  const std::string key = limit ? "min_limit" : "min_capacity";
  struct RefusedEarly {};  // --strict and a trace that ends early: refused at the first probe, not after the search
  auto observer = [&](const trace::CapacityProbe& p) {
    if (args.strict && t.truncated) throw RefusedEarly{};
    if (args.json) return;
    std::fprintf(stderr, "probe %zu/~%zu: %s %s: %s\n", p.number, p.estimated_total, what, bytes(p.capacity).c_str(),
                 p.ok ? "ok" : fmt::format("OOM at event {}", grouped(p.oom ? p.oom->event_index : 0)).c_str());
  };
  trace::MinCapacityResult m;
  try {
    m = trace::find_min_capacity(args.path, t, observer, page, trace::kDefaultStepCacheBytes,
                                 limit ? trace::Searched::limit : trace::Searched::capacity);
  } catch (const RefusedEarly&) {
    accept_ending(args, t);
    return kExitUsage;
  } catch (const OutOfMemoryError& e) {
    if (args.json) print_json(nlohmann::json{{"trace", t.path}, {key, nullptr}, {"error", e.what()}});
    std::fflush(stdout);
    std::fprintf(stderr, "gpumem replay: %s\n", e.what());
    return kExitOutOfMemory;
  }
  if (!accept_ending(args, t)) return kExitUsage;
  if (args.json) {
    nlohmann::json j = to_json(t, m.unconstrained);
    j[key] = m.capacity;
    j[key + "_ratio"] = m.ratio;
    j[key + "_every_above"] = m.every_above;
    j[key + "_every_above_ratio"] = m.every_above_ratio;
    j[key + "_failed_above"] = m.failed_above;
    j[key + "_probes"] = m.probes;
    j[key + "_seconds"] = m.seconds;
    print_json(j);
  } else {
    print_table(t, m.unconstrained);
    std::printf("  %-22s %s = %.4f x peak live (%zu probe%s at 2 MiB steps, %.2f s)\n", limit ? "min limit" : "min capacity",
                bytes(m.capacity).c_str(), m.ratio, m.probes, m.probes == 1 ? "" : "s", m.seconds);
    if (!m.failed_above.empty()) {
      std::string failed;
      for (std::uint64_t c : m.failed_above) failed += (failed.empty() ? "" : ", ") + bytes(c);
      std::printf("  %-22s %s = %.4f x peak live (larger sizes out of memory: %s)\n", "every size from",
                  bytes(m.every_above).c_str(), m.every_above_ratio, failed.c_str());
    }
  }
  return kExitOk;
}

nlohmann::json pool_json(const report::ExcessBreakdown::Pool& p) {
  return {{"part_page_free", p.part_page_free}, {"part_pages", p.part_pages},
          {"whole_page_free", p.whole_page_free}, {"whole_pages", p.whole_pages}};
}

nlohmann::json breakdown_json(std::size_t event, const report::ExcessBreakdown& b) {
  return {{"event", event},
          {"reserved", b.reserved},
          {"allocated", b.allocated},
          {"excess", b.excess()},
          {"small_pool", pool_json(b.small)},
          {"large_pool", pool_json(b.large)},
          {"mapped_nowhere", b.mapped_nowhere},
          {"parted_pages", b.parted_pages},
          {"waiting_on_streams", b.waiting_on_streams},
          {"plain_free", b.plain_free},
          {"streams", b.streams}};
}

void print_breakdown(std::size_t event, const report::ExcessBreakdown& b) {
  const auto row = [](const char* label, const std::string& value) { std::printf("  %-22s %s\n", label, value.c_str()); };
  const auto pools = [](std::size_t large, std::size_t large_pages, std::size_t small, std::size_t small_pages) {
    return fmt::format("{} in {} pages of the large pools, {} in {} of the small", bytes(large), grouped(large_pages),
                       bytes(small), grouped(small_pages));
  };
  std::printf("\n  at the peak (after event %s): reserved %s, allocated %s, %s reserved beyond it:\n",
              grouped(event).c_str(), bytes(b.reserved).c_str(), bytes(b.allocated).c_str(), bytes(b.excess()).c_str());
  row("free in part-used pages", pools(b.large.part_page_free, b.large.part_pages, b.small.part_page_free, b.small.part_pages));
  row("whole free pages", pools(b.large.whole_page_free, b.large.whole_pages, b.small.whole_page_free, b.small.whole_pages));
  if (b.mapped_nowhere) row("pages mapped nowhere", bytes(b.mapped_nowhere));
  if (b.parted_pages) row("parts of pages", bytes(b.parted_pages) + " given back while the rest of their page is mapped");
  if (b.waiting_on_streams) row("waiting on streams", bytes(b.waiting_on_streams));
  if (b.plain_free) row("free in plain segments", bytes(b.plain_free));
  row("stream pools", grouped(b.streams));
}

int replay_once(const ReplayArgs& args, TraceInfo& t, std::uint64_t capacity, std::uint64_t page, std::uint64_t limit) {
  trace::ReplayOptions options;
  options.capacity = capacity;
  options.limit = limit;
  options.page = page;
  options.map_ahead = args.map_ahead;
  const ReplayResult r = args.peak_breakdown ? trace::replay_with_peak_snapshot(args.path, t, options)
                                             : trace::replay(args.path, t, options);
  if (!accept_ending(args, t)) return kExitUsage;
  std::optional<report::ExcessBreakdown> breakdown;
  if (r.snapshot) breakdown = report::explain_excess(*r.snapshot);
  if (args.json) {
    nlohmann::json j = to_json(t, r);
    if (breakdown) j["peak_breakdown"] = breakdown_json(r.peak_event, *breakdown);
    print_json(j);
  } else {
    print_table(t, r);
    if (breakdown) print_breakdown(r.peak_event, *breakdown);
  }
  if (r.first_oom) {
    std::fflush(stdout);
    std::fprintf(stderr, "gpumem replay: %s%s\n", oom_sentence(*r.first_oom).c_str(),
                 r.ooms > 1 ? fmt::format(" ({} allocations failed in all)", r.ooms).c_str() : "");
    return kExitOutOfMemory;
  }
  return kExitOk;
}

// A size option's value into `out` when it was given; false (after saying why) when it does not parse.
bool parse_size_option(const CLI::Option* option, const std::string& text, std::uint64_t& out) {
  if (!option->count()) return true;
  try {
    out = parse_size(text);
    return true;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "gpumem replay: %s: %s\n", option->get_name().c_str(), e.what());
    return false;
  }
}

int run_replay(ReplayArgs args) {  // a copy: "-" becomes /dev/stdin
  std::uint64_t page = trace::kDefaultReplayPage, capacity = trace::kDefaultReplayCapacity, limit = 0;
  if (!parse_size_option(args.page_option, args.page, page) ||
      !parse_size_option(args.capacity_option, args.capacity, capacity) ||
      !(means_no_limit(args.limit) || parse_size_option(args.limit_option, args.limit, limit)))  // as run's
    return kExitUsage;
  if (page < 4096 || page > (std::uint64_t(1) << 30) || (page & (page - 1)) != 0) {
    std::fprintf(stderr, "gpumem replay: --page must be a power of two from 4 KiB to 1 GiB, e.g. 2MiB or 16MiB\n");
    return kExitUsage;
  }
  const std::uint64_t granule = std::min(page, trace::kReplayGranule);
  if (capacity > kMaxReplayCapacity) {
    std::fprintf(stderr, "gpumem replay: --capacity must be at most 16 TiB (the simulated device's pages take host memory)\n");
    return kExitUsage;
  }
  if (args.limit_option->count() && !means_no_limit(args.limit) && (limit < granule || limit > capacity)) {
    std::fprintf(stderr, "gpumem replay: --limit must be at least one granule (%s) and at most the capacity (%s)\n",
                 format_bytes(granule).c_str(), format_bytes(capacity).c_str());
    return kExitUsage;
  }
  // Whole granules, as a device hands memory out (and as --min-capacity probes it): the large page is
  // only the size gpumem grows in, and rounding to it would replay a smaller device than asked for. A
  // limit as large as the capacity given stays no larger than the device.
  capacity = capacity / granule * granule;
  if (capacity < granule) {
    std::fprintf(stderr, "gpumem replay: --capacity must be at least one granule of the sim device (%s)\n",
                 format_bytes(granule).c_str());
    return kExitUsage;
  }
  limit = std::min(limit, capacity);
  if (args.path == "-") args.path = "/dev/stdin";  // read as any pipe is
  TraceInfo t;
  try {
    return args.min_capacity || args.min_limit ? find_min_capacity(args, t, page) : replay_once(args, t, capacity, page, limit);
  } catch (const trace::TraceError& e) {
    std::fprintf(stderr, "gpumem replay: %s\n", e.what());
    return e.line() == 0 ? kExitFailure : kExitUsage;  // line 0: the file could not be opened or read (I/O)
  } catch (const std::bad_alloc&) {
    // The trace streams: what fills memory is in proportion to the blocks it keeps live at once.
    std::fprintf(stderr,
                 "gpumem replay: out of host memory while replaying %s (this machine's memory, or the ulimit -v it "
                 "runs under, is too small for the blocks this trace keeps live at once)\n",
                 printable(args.path).c_str());
    return kExitOutOfMemory;
  }
}

CommandRunner setup_replay(CLI::App& sub) {
  auto args = std::make_shared<ReplayArgs>();
  sub.add_option("trace", args->path, "gpumem-trace file (JSON lines, plain or gzip; - reads stdin)")->required();
  auto* cap = args->capacity_option = sub.add_option("--capacity", args->capacity,
                             "Physical memory of the simulated device, e.g. 16GiB, 1.5GB, 512MiB or bytes, "
                             "in whole 2 MiB granules (default 1TiB: effectively unbounded; at most 16TiB). An allocation that fails even after the "
                             "allocator released its cache is reported and the exit status is 3.");
  auto* limit = args->limit_option = sub.add_option("--limit", args->limit,
                             "gpumem's own cap on reserved bytes, as `gpumem run --limit` sets it (the device keeps "
                             "--capacity): an allocation beyond it fails, and the exit status is 3; none (the default) for no limit");
  args->page_option = sub.add_option("--page", args->page,
                 "Large page of the simulated device: past the first 128 of them reserved, growth for requests "
                 "of 8 or more of them is made of such pages, the rest of 2 MiB granules, as the CUDA backend does "
                 "(default 16MiB); "
                 "below 2MiB it is the granule too");
  sub.add_flag("--strict", args->strict,
               "Refuse a trace that ends early (exit status 2); by default its complete events are replayed, with "
               "a warning on stderr and the JSON keys truncated and truncation");
  sub.add_flag("--json", args->json, "Print one JSON object (keys: events, peak_requested, peak_reserved, ratio, "
                                     "device_calls, ooms, seconds, ...)");
  sub.add_flag("--min-capacity", args->min_capacity,
               "Search (bisection at 2 MiB steps) the smallest capacity that replays without OOM and report it "
               "and its ratio to peak live; up to 8 sizes between it and the peak are replayed too, and any that "
               "run out of memory are named with the smallest size from which every probed one runs "
               "(JSON keys min_capacity_every_above, min_capacity_failed_above); progress on stderr")
      ->excludes(cap)
      ->excludes(limit);
  sub.add_flag("--min-limit", args->min_limit,
               "Search the same way the smallest --limit (gpumem's own cap, as `gpumem run --limit` sets it) "
               "under which the trace replays without OOM on an unbounded device: the limit to run the program "
               "with")
      ->excludes(cap)
      ->excludes(limit)
      ->excludes("--min-capacity");
  sub.add_flag("--peak-breakdown", args->peak_breakdown,
               "Replay again to the allocation that reached the peak and say where the bytes reserved beyond the "
               "allocated ones sit: free in pages that also hold live bytes (kept until those go), whole free "
               "pages (lendable, given back by empty_cache), pages mapped nowhere, blocks waiting on other streams "
               "(JSON key peak_breakdown)")
      ->excludes("--min-capacity")
      ->excludes("--min-limit");
  sub.add_flag("--map-ahead", args->map_ahead,
               "Count the pages the CUDA backend would make ahead of need on its own thread: made, and unmapped "
               "unused (JSON keys ahead_pages, ahead_unused); they take the device's capacity while they wait, and the "
               "device's peak with them is shown (JSON key peak_device); not with --limit, under which none are made")
      ->excludes("--min-capacity")  // the searches probe without pages made ahead (a limit turns them off)
      ->excludes("--min-limit")
      ->excludes(limit);
  return [args] { return run_replay(*args); };
}

}  // namespace

GPUMEM_REGISTER_COMMAND(replay, "replay",
                        "Replay an allocation trace against gpumem's allocator on a simulated device and compare "
                        "with what PyTorch reserved",
                        20, setup_replay);

}  // namespace gpumem::cli
