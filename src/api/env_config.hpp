// Settings the environment gives the default allocators (set by `gpumem run` or by hand):
//   GPUMEM_BACKEND   cuda | cuda-plain | host | sim (default cuda)
//   GPUMEM_LIMIT     cap on reserved bytes per device, a size such as "12GiB" or "1.5GB", at least 2 MiB;
//                    "none" for no limit
//   GPUMEM_FRACTION  cap as a fraction of the device's memory, 0.0001 <= f <= 1
//   GPUMEM_CUDA_PAGE_MIB  physical page of the cuda backend in MiB (default 16, or 2 under a limit)
//   GPUMEM_MAP_AHEAD=0  the cuda backend makes no pages ahead of need (README; 1, the default: it does)
//   GPUMEM_HOST_CAPACITY / GPUMEM_SIM_CAPACITY  capacity of the host / sim backends
//   GPUMEM_HOST_SHARED  host backend: a file whose counter makes one capacity shared across processes
//   GPUMEM_CONTROL=0    no control socket (src/control); GPUMEM_CONTROL_DIR: where the sockets live
//   GPUMEM_COOPERATIVE=0  on a full device, do not ask other gpumem processes to release their cache
// The switches (MAP_AHEAD, CONTROL, COOPERATIVE) take 1/0, true/false, yes/no or on/off in any case
// (engine/env_switch.hpp). A malformed value throws gpumem::Error naming the variable; an unset or empty
// one is absent.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace gpumem::api {

std::string env_backend();
std::optional<std::uint64_t> env_size(const char* name);
std::optional<std::uint64_t> env_limit();  // 0 = "none"
std::optional<double> env_fraction(const char* name);
std::optional<std::uint64_t> env_cuda_page_bytes();  // GPUMEM_CUDA_PAGE_MIB, in bytes
bool env_switch(const char* name, bool absent);  // a switch variable; `absent` when unset or empty
bool env_map_ahead();  // GPUMEM_MAP_AHEAD (the cuda backend reads it too)
inline constexpr const char* kSwitchVariables[] = {"GPUMEM_MAP_AHEAD", "GPUMEM_CONTROL", "GPUMEM_COOPERATIVE"};
void env_check_switches();  // each of kSwitchVariables, whatever the backend

}  // namespace gpumem::api
