// gpumem snapshot PID -o FILE: a running gpumem process's memory snapshot, fetched over its control socket
// (src/control/client.hpp) and written by this process, so FILE is opened with the caller's permissions and
// the program never writes through a path it was given.
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "cli/output_file.hpp"
#include "control/client.hpp"
#include "gpumem/trace.hpp"

namespace gpumem::cli {
namespace {

constexpr const char* kSnapshotExitHelp =
    "Exit codes:\n"
    "  0  success\n"
    "  1  failure: the process is gone, runs no gpumem, belongs to another user, did not answer in 2 s or has\n"
    "     no allocator on --device; or FILE cannot be written (one sentence on stderr says which; FILE is then\n"
    "     left as it was)\n"
    "  2  bad usage (unknown flag, bad PID, --format other than pickle or json, --json with -o -)\n";

struct SnapshotArgs {
  int pid = 0;
  std::string file;
  std::string format;  // "" : from FILE's name
  int device = -1;     // -1: every device
  bool json = false;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

control::SnapshotFormat format_of(const SnapshotArgs& a) {
  if (a.format == "pickle") return control::SnapshotFormat::pickle;
  if (a.format == "json") return control::SnapshotFormat::json;
  if (!a.format.empty()) throw CLI::ValidationError("--format must be pickle or json, not '" + a.format + "'");
  return ends_with(a.file, ".json") ? control::SnapshotFormat::json : control::SnapshotFormat::pickle;
}

int run_snapshot(const SnapshotArgs& a) {
  control::SnapshotFormat format = format_of(a);
  if (a.file.empty()) throw CLI::ValidationError("-o needs a file name ('-' for stdout)");
  if (a.json && a.file == "-") throw CLI::ValidationError("--json and -o - would both write to stdout");
  std::optional<int> device;
  if (a.device >= 0) device = a.device;
  control::SnapshotSummary s;
  try {
    OutputFile out(a.file);  // before asking: an unwritable FILE costs the process nothing
    s = control::snapshot(a.pid, format, device, [&](std::string_view chunk) { out.write(chunk); });
    out.commit();
  } catch (const control::ControlError& e) {
    std::fprintf(stderr, "gpumem: %s.\n", e.what());
    return kExitFailure;
  } catch (const OutputFileError& e) {
    std::fprintf(stderr, "gpumem snapshot: %s.\n", e.what());
    return kExitFailure;
  }
  const char* name = control::snapshot_format_name(format);
  if (a.json) {
    print_json(nlohmann::ordered_json{{"pid", a.pid},
                                      {"file", a.file},
                                      {"bytes", s.bytes},
                                      {"format", name},
                                      {"blocks", s.blocks},
                                      {"active_blocks", s.active_blocks},
                                      {"segments", s.segments},
                                      {"devices", s.devices}});
  } else if (a.file != "-") {
    std::printf("%d: %s snapshot written to %s (%s; %lld blocks, %lld in use, in %lld segments on %lld %s)\n",
                a.pid, name, a.file.c_str(), format_bytes(std::size_t(s.bytes)).c_str(), (long long)s.blocks,
                (long long)s.active_blocks, (long long)s.segments, (long long)s.devices,
                s.devices == 1 ? "device" : "devices");
  }
  return kExitOk;
}

}  // namespace

GPUMEM_REGISTER_COMMAND(
    snapshot, "snapshot", "memory snapshot of a running gpumem process (PyTorch's pickle or gpumem's JSON)", 65,
    [](CLI::App& sub) -> CommandRunner {
      auto a = std::make_shared<SnapshotArgs>();
      sub.footer(kSnapshotExitHelp);
      sub.add_option("pid", a->pid, "process id of a program running on gpumem")
          ->required()
          ->check(pid_validator());
      sub.add_option("-o,--output", a->file,
                     "FILE to write ('-': stdout); replaced only once the whole snapshot has arrived")
          ->required();
      sub.add_option("--format", a->format,
                     "pickle (torch.cuda.memory._snapshot(): pickle.load, torch.cuda._memory_viz, "
                     "pytorch.org/memory_viz) or json (gpumem's own, with holes and mappings); default: json "
                     "when FILE ends in .json, else pickle");
      sub.add_option("--device", a->device, "only this device of that process (default: all)")
          ->check(device_index_validator());
      sub.add_flag("--json", a->json, "print {pid, file, bytes, format, blocks, segments, ...} as JSON");
      return [a, &sub] {
        try {
          return run_snapshot(*a);
        } catch (const CLI::ValidationError& e) {
          std::fprintf(stderr, "gpumem %s: %s.\n", sub.get_name().c_str(), e.what());
          return int(kExitUsage);
        }
      };
    });

}  // namespace gpumem::cli
