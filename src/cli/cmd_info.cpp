// gpumem info: driver, every GPU, the CUDA numbering, processes and warnings on one screen.
#include <memory>

#include "cli/command.hpp"
#include "cli/gpumem_allocators.hpp"
#include "cli/monitor_cli.hpp"
#include "cli/output.hpp"
#include "monitor/info.hpp"

namespace gpumem::cli {
namespace {
struct InfoOptions {
  std::string ids;
  bool json = false;
};
}  // namespace

GPUMEM_REGISTER_COMMAND(
    info, "info", "health check: driver, GPUs, memory, modes, ECC, CUDA numbering, processes, warnings", 10,
    [](CLI::App& sub) -> CommandRunner {
      auto o = std::make_shared<InfoOptions>();
      sub.add_option("-i,--id", o->ids, "GPUs: comma-separated indices, UUIDs or PCI bus ids");
      sub.add_flag("--json", o->json, "print JSON");
      return [o] {
        return run_monitor_command("info", [&] {
          auto nvml = nvml::Nvml::open();
          auto report = monitor::collect_info(*nvml, monitor::select_gpus(*nvml, o->ids));
          std::vector<NvmlCharge> charges;
          for (const auto& g : report.gpus)
            if (g.processes)
              for (const auto& p : *g.processes)
                if (p.used_bytes) charges.push_back({int(p.pid), *p.used_bytes});
          auto allocators = gpumem_allocators(charges);
          std::string text;
          if (o->json) {
            auto j = monitor::info_json(report);
            if (!allocators.empty()) j["gpumem_allocators"] = allocators_json(allocators);
            text = json_text(j);
          } else {
            text = monitor::render_info(report) + render_allocators(allocators);
          }
          std::fwrite(text.data(), 1, text.size(), stdout);
          return kExitOk;
        });
      };
    });

}  // namespace gpumem::cli
