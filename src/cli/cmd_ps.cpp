// gpumem ps: every process using a GPU, including device-node holders without a context and NVML
// entries whose process is gone, plus memory that no process accounts for.
#include <memory>

#include "cli/command.hpp"
#include "cli/gpumem_allocators.hpp"
#include "cli/monitor_cli.hpp"
#include "cli/output.hpp"
#include "monitor/ps.hpp"

namespace gpumem::cli {
namespace {
struct PsOptions {
  std::string ids;
  bool json = false;
};
}  // namespace

GPUMEM_REGISTER_COMMAND(
    ps, "ps", "every process using a GPU: memory, user, command, container, holders without a context", 40,
    [](CLI::App& sub) -> CommandRunner {
      auto o = std::make_shared<PsOptions>();
      sub.add_option("-i,--id", o->ids, "GPUs: comma-separated indices, UUIDs or PCI bus ids");
      sub.add_flag("--json", o->json, "print JSON");
      return [o] {
        return run_monitor_command("ps", [&] {
          auto nvml = nvml::Nvml::open();
          auto report = monitor::collect_ps(*nvml, monitor::select_gpus(*nvml, o->ids), monitor::device_dir());
          std::vector<NvmlCharge> charges;
          for (const auto& e : report.entries)
            if (e.used_bytes) charges.push_back({e.pid, *e.used_bytes});
          auto allocators = gpumem_allocators(charges);
          std::string text;
          if (o->json) {
            auto j = monitor::ps_json(report);
            if (!allocators.empty()) j["gpumem_allocators"] = allocators_json(allocators);
            text = json_text(j);
          } else {
            text = monitor::render_ps(report) + render_allocators(allocators);
          }
          std::fwrite(text.data(), 1, text.size(), stdout);
          return kExitOk;
        });
      };
    });

}  // namespace gpumem::cli
