// --help-query-gpu / --help-query-compute-apps: the field list in nvidia-smi's layout (a quoted name,
// its aliases joined by "or", one paragraph of description, a blank line).
#include <map>

#include "monitor/query.hpp"

namespace gpumem::monitor {
namespace {

const std::map<std::string, const char*>& descriptions() {
  static const std::map<std::string, const char*> d = {
      {"timestamp", "The timestamp of when the query was made in format \"YYYY/MM/DD HH:MM:SS.msec\"."},
      {"driver_version", "The version of the installed NVIDIA display driver."},
      {"count", "The number of NVIDIA GPUs in the system."},
      {"name", "The official product name of the GPU."},
      {"pci.bus_id", "PCI bus id as \"domain:bus:device.function\", in hex."},
      {"uuid", "This value is the globally unique immutable alphanumeric identifier of the GPU."},
      {"index", "Zero based index of the GPU. Can change at each boot."},
      {"pstate", "The current performance state for the GPU. States range from P0 (maximum performance) to P12 (minimum performance)."},
      {"temperature.gpu", "Core GPU temperature. in degrees C."},
      {"temperature.memory", "HBM memory temperature. in degrees C."},
      {"utilization.gpu", "Percent of time over the past sample period during which one or more kernels was executing on the GPU."},
      {"utilization.memory", "Percent of time over the past sample period during which global (device) memory was being read or written."},
      {"memory.total", "Total installed GPU memory."},
      {"memory.reserved", "Total memory reserved by the NVIDIA driver and firmware."},
      {"memory.used", "Total memory allocated by active contexts."},
      {"memory.free", "Total free memory."},
      {"power.draw", "The last measured power draw for the entire board, in watts."},
      {"power.limit", "The software power limit in watts. Set by software like nvidia-smi."},
      {"enforced.power.limit", "The power management algorithm's power ceiling, in watts. Total board power draw is manipulated by the power management algorithm such that it stays under this value."},
      {"power.default_limit", "The default power management algorithm's power ceiling, in watts."},
      {"power.min_limit", "The minimum value in watts that power limit can be set to."},
      {"power.max_limit", "The maximum value in watts that power limit can be set to."},
      {"clocks.current.graphics", "Current frequency of graphics (shader) clock."},
      {"clocks.current.sm", "Current frequency of SM (Streaming Multiprocessor) clock."},
      {"clocks.current.memory", "Current frequency of memory clock."},
      {"clocks.max.graphics", "Maximum frequency of graphics (shader) clock."},
      {"clocks.max.sm", "Maximum frequency of SM (Streaming Multiprocessor) clock."},
      {"clocks.max.memory", "Maximum frequency of memory clock."},
      {"fan.speed", "The fan speed value is the percent of the product's maximum noise tolerance fan speed that the device's fan is currently intended to run at."},
      {"persistence_mode", "A flag that indicates whether persistence mode is enabled for the GPU."},
      {"compute_mode", "The compute mode flag indicates whether individual or multiple compute applications may run on the GPU."},
      {"ecc.mode.current", "The ECC mode that the GPU is currently operating under."},
      {"ecc.errors.corrected.volatile.total", "Total errors detected across entire chip since the last driver load."},
      {"ecc.errors.uncorrected.volatile.total", "Total uncorrected errors detected across entire chip since the last driver load."},
      {"ecc.errors.corrected.aggregate.total", "Total errors detected across entire chip for the lifetime of the GPU."},
      {"ecc.errors.uncorrected.aggregate.total", "Total uncorrected errors detected across entire chip for the lifetime of the GPU."},
      {"mig.mode.current", "The MIG mode that the GPU is currently operating under."},
      {"vbios_version", "The BIOS of the GPU board."},
      {"serial", "This number matches the serial number physically printed on each board. It is a globally unique immutable alpha-numeric value."},
      {"display_mode", "Deprecated, do not use."},
      {"display_active", "A flag that indicates whether a display is initialized on the GPU's (e.g. memory is allocated on the device for display)."},
      {"pcie.link.gen.current", "The current PCI-E link generation. These may be reduced when the GPU is not in use."},
      {"pcie.link.gen.max", "The maximum PCI-E link generation possible with this GPU and system configuration."},
      {"pcie.link.width.current", "The current PCI-E link width. These may be reduced when the GPU is not in use."},
      {"pcie.link.width.max", "The maximum PCI-E link width possible with this GPU and system configuration."},
      {"clocks_event_reasons.active", "Bitmask of active clock event reasons."},
      {"clocks_event_reasons.gpu_idle", "Nothing is running on the GPU and the clocks are dropping to Idle state."},
      {"clocks_event_reasons.applications_clocks_setting", "GPU clocks are limited by applications clocks setting."},
      {"clocks_event_reasons.sw_power_cap", "SW Power Scaling algorithm is reducing the clocks below requested clocks because the GPU is consuming too much power."},
      {"clocks_event_reasons.hw_slowdown", "HW Slowdown (reducing the core clocks by a factor of 2 or more) is engaged."},
      {"clocks_event_reasons.sync_boost", "This GPU has been added to a Sync boost group with nvidia-smi or DCGM in order to maximize performance per watt."},
      {"clocks_event_reasons.sw_thermal_slowdown", "SW Thermal capping algorithm is reducing clocks below requested clocks because GPU temperature is higher than Max Operating Temp."},
      {"clocks_event_reasons.hw_thermal_slowdown", "HW Thermal Slowdown (reducing the core clocks by a factor of 2 or more) is engaged."},
      {"clocks_event_reasons.hw_power_brake_slowdown", "HW Power Brake Slowdown (reducing the core clocks by a factor of 2 or more) is engaged."},
      {"retired_pages.single_bit_ecc.count", "The number of GPU device memory pages that have been retired due to multiple single bit ECC errors."},
      {"retired_pages.double_bit.count", "The number of GPU device memory pages that have been retired due to a double bit ECC error."},
      {"retired_pages.pending", "Checks if any GPU device memory pages are pending retirement on the next reboot. Pages that are pending retirement can still be allocated, and may cause further reliability issues."},
      // --query-compute-apps
      {"gpu_name", "The official product name of the GPU."},
      {"gpu_bus_id", "PCI bus id as \"domain:bus:device.function\", in hex."},
      {"gpu_uuid", "This value is the globally unique immutable alphanumeric identifier of the GPU."},
      {"pid", "Process ID of the compute application."},
      {"process_name", "Process Name."},
      {"used_gpu_memory", "Amount memory used on the device by the context. Not available on Windows when running in WDDM mode."},
  };
  return d;
}

}  // namespace

std::string help_query_text(bool apps) {
  std::string out = std::string("List of valid properties to query for the switch \"") +
                    (apps ? "--query-compute-apps" : "--query-gpu") + "=\":\n\n";
  for (const auto& f : apps ? app_field_list() : gpu_field_list()) {
    out += "\"" + f.name + "\"";
    for (const auto& a : f.aliases) out += " or \"" + a + "\"";
    out += "\n";
    auto it = descriptions().find(f.name);
    out += std::string(it == descriptions().end() ? "No description." : it->second) + "\n\n";
  }
  return out;
}

}  // namespace gpumem::monitor
