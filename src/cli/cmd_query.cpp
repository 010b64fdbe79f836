// gpumem query: nvidia-smi's --query-gpu / --query-compute-apps, same fields, units and CSV; faster.
#include <cerrno>
#include <cstring>
#include <memory>

#include "cli/command.hpp"
#include "cli/monitor_cli.hpp"
#include "monitor/loop.hpp"
#include "monitor/query.hpp"

namespace gpumem::cli {
namespace {

struct QueryOptions {
  std::string gpu_fields, app_fields, format = "csv", ids, loop, loop_ms, file;
  bool help_fields = false, help_gpu = false, help_apps = false;
};

// -l SEC, -lms MS (CLI11 reads "-lms 10" as -l "ms" followed by an extra "10"), --loop-ms MS.
long loop_period_ms(const QueryOptions& o, std::vector<std::string> extras) {
  std::string ms_text = o.loop_ms;
  if (o.loop == "ms" || o.loop.rfind("ms=", 0) == 0) {
    if (o.loop.size() > 3) ms_text = o.loop.substr(3);
    else if (!extras.empty()) ms_text = extras.front(), extras.erase(extras.begin());
    else throw monitor::UsageError("-lms needs a number of milliseconds.");
  }
  if (!extras.empty()) throw monitor::UsageError("unexpected argument '" + extras.front() + "'.");
  if (!ms_text.empty()) {
    size_t used = 0;
    long v = 0;
    try { v = std::stol(ms_text, &used); } catch (const std::exception&) { used = 0; }
    if (used != ms_text.size() || v <= 0) throw monitor::UsageError("-lms needs a positive number of milliseconds, not '" + ms_text + "'.");
    if (v > 10000000000L) throw monitor::UsageError("-lms is at most 10000000000 milliseconds (as -l is at most 10^7 s), not '" + ms_text + "'.");
    if (!o.loop.empty() && o.loop != "ms" && o.loop.rfind("ms=", 0) != 0)
      throw monitor::UsageError("give one of -l SEC and -lms / --loop-ms MS.");
    return v;
  }
  if (!o.loop.empty()) return parse_seconds_ms("-l", o.loop);
  return 0;
}

int run_query(const QueryOptions& o, CLI::App& sub) {
  if (o.help_fields) {
    std::printf("--query-gpu fields:\n");
    for (const auto& n : monitor::gpu_field_names()) std::printf("  %s\n", n.c_str());
    std::printf("--query-compute-apps fields:\n");
    for (const auto& n : monitor::app_field_names()) std::printf("  %s\n", n.c_str());
    return kExitOk;
  }
  if (o.help_gpu || o.help_apps) {
    std::string text = o.help_gpu ? monitor::help_query_text(false) : monitor::help_query_text(true);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kExitOk;
  }
  // `--query-gpu= --format=csv`: the empty value let the next option be read as the field list.
  for (const std::string* fields : {&o.gpu_fields, &o.app_fields})
    if (fields->rfind("--", 0) == 0)
      throw monitor::UsageError("the field list is empty: give --query-gpu=FIELDS or --query-compute-apps=FIELDS.");
  if (o.gpu_fields.empty() == o.app_fields.empty())
    throw monitor::UsageError("give exactly one of --query-gpu=FIELDS or --query-compute-apps=FIELDS.");
  monitor::QueryRequest req = o.app_fields.empty() ? monitor::parse_gpu_fields(o.gpu_fields)
                                                   : monitor::parse_app_fields(o.app_fields);
  monitor::QueryFormat fmt = monitor::parse_query_format(o.format);
  long period_ms = loop_period_ms(o, sub.remaining());

  // The output file is opened before NVML so that a bad path fails before any sampling.
  std::unique_ptr<FILE, int (*)(FILE*)> file(nullptr, &std::fclose);
  if (!o.file.empty()) {
    file.reset(std::fopen(o.file.c_str(), "w"));
    if (!file) {
      std::fprintf(stderr, "gpumem query: cannot write %s: %s.\n", o.file.c_str(), std::strerror(errno));
      return kExitFailure;
    }
  }
  FILE* out = file ? file.get() : stdout;

  auto nvml = nvml::Nvml::open();
  auto gpus = monitor::select_gpus(*nvml, o.ids);
  if (period_ms > 0) monitor::install_stop_handlers();
  monitor::Ticker ticker{std::chrono::milliseconds(period_ms)};
  bool first = true;
  monitor::QueryCache cache;
  do {
    std::string warnings;
    std::string text = monitor::render_query(*nvml, gpus, req, fmt, first, &warnings, period_ms > 0 ? &cache : nullptr);
    if (std::fwrite(text.data(), 1, text.size(), out) != text.size() || std::fflush(out) != 0) {
      std::fprintf(stderr, "gpumem query: cannot write output: %s.\n", std::strerror(errno));
      return kExitFailure;
    }
    if (!warnings.empty()) std::fputs(warnings.c_str(), stderr);
    first = false;
  } while (period_ms > 0 && ticker.wait());
  return monitor::stop_exit_code();
}

}  // namespace

GPUMEM_REGISTER_COMMAND(
    query, "query", "nvidia-smi style --query-gpu / --query-compute-apps (CSV or JSON)", 20,
    [](CLI::App& sub) -> CommandRunner {
      auto o = std::make_shared<QueryOptions>();
      sub.add_option("--query-gpu", o->gpu_fields, "comma-separated GPU fields (see --help-query)");
      sub.add_option("--query-compute-apps", o->app_fields, "comma-separated process fields: pid,process_name,gpu_uuid,used_memory,...");
      sub.add_option("--format", o->format, "csv[,noheader][,nounits] or json (default csv)");
      sub.add_option("-i,--id", o->ids, "GPUs: comma-separated indices, UUIDs or PCI bus ids");
      sub.add_option("-l,--loop", o->loop, "repeat every SEC seconds until Ctrl-C (-lms MS: every MS milliseconds)");
      sub.add_option("--loop-ms", o->loop_ms, "repeat every MS milliseconds until Ctrl-C");
      sub.add_option("-f,--filename", o->file, "write to FILE instead of stdout");
      sub.add_flag("--help-query", o->help_fields, "list the supported fields");
      sub.add_flag("--help-query-gpu", o->help_gpu, "describe the --query-gpu fields (nvidia-smi's layout)");
      sub.add_flag("--help-query-compute-apps", o->help_apps, "describe the --query-compute-apps fields");
      sub.allow_extras();
      return [o, &sub] { return run_monitor_command("query", [&] { return run_query(*o, sub); }); };
    });

}  // namespace gpumem::cli
