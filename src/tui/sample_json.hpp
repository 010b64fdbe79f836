// The full monitor sample as JSON: what `gpumem --json --full` prints and libgpumem_monitor.so returns
// (include/gpumem/gpumem_monitor.h), so the CLI and gpumem.gpus() share one schema. Contract: a pure
// function of one TopData; every field a GPU or process could not report is null, never left out.
//
// {"schema": 1, "taken_at": unix seconds, "nvml_ms": NVML time of the sample, "control_error": null|text,
//  "gpus": [{"index", "error": null|text, "name", "uuid", "bus_id", "minor",
//            "memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "memory_reserved_bytes",
//            "utilization_gpu_percent", "utilization_memory_percent", "temperature_c", "memory_temperature_c",
//            "power_mw", "power_limit_mw", "clock_graphics_mhz", "clock_sm_mhz", "clock_memory_mhz",
//            "max_clock_graphics_mhz", "max_clock_sm_mhz", "max_clock_memory_mhz", "fan_percent",
//            "pstate" ("P0".."P15"), "energy_mj", "pcie_replays", "encoder_percent", "decoder_percent",
//            "jpg_percent", "ofa_percent", "bar1_used_bytes", "ecc_corrected", "ecc_uncorrected",
//            "processes_error": null|text,
//            "processes": null (not read) | [{"pid", "kind": "context"|"no_context"|"gone", "type": "C"|"G"|"C+G"|"-",
//                           "used_memory_bytes", "user", "command" (command line), "name" (short name),
//                           "container", "cpu_percent", "sm_percent",
//                           gpumem processes only: "allocated_bytes", "reserved_bytes",
//                           "allocated_peak_bytes", "limit_bytes", "device" (its own device number)}]}]}
#pragma once
#include <nlohmann/json.hpp>

#include "tui/top_data.hpp"

namespace gpumem::tui {

inline constexpr int kSampleSchema = 1;
nlohmann::ordered_json sample_json(const TopData& data);

}  // namespace gpumem::tui
