#include "api/env_config.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <stdexcept>

#include "engine/env_switch.hpp"
#include "gpumem/errors.hpp"
#include "gpumem/limits.hpp"
#include "gpumem/trace.hpp"  // parse_size

namespace gpumem::api {
namespace {
const char* get(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}
}  // namespace

std::string env_backend() {
  const char* value = get("GPUMEM_BACKEND");
  return value ? value : "cuda";
}

std::optional<std::uint64_t> env_size(const char* name) {
  const char* value = get(name);
  if (!value) return std::nullopt;
  try {
    return parse_size(value);
  } catch (const std::invalid_argument& e) {
    throw Error(std::string("gpumem: ") + name + "='" + value + "' is not a size: " + e.what());
  }
}

std::optional<std::uint64_t> env_limit() {
  const char* value = get("GPUMEM_LIMIT");
  if (!value) return std::nullopt;
  // Both set: one cap would silently replace the other (`gpumem run` refuses --limit with --fraction too).
  if (const char* fraction = get("GPUMEM_FRACTION"))
    throw Error(std::string("gpumem: GPUMEM_LIMIT='") + value + "' and GPUMEM_FRACTION='" + fraction +
                "' exclude each other: set one of them");
  try {
    return parse_limit(value);
  } catch (const std::invalid_argument& e) {
    throw Error(std::string("gpumem: GPUMEM_LIMIT='") + value + "' is not a limit: " + e.what());
  }
}

std::optional<double> env_fraction(const char* name) {
  const char* value = get(name);
  if (!value) return std::nullopt;
  try {
    return parse_fraction(value);
  } catch (const std::invalid_argument& e) {
    throw Error(std::string("gpumem: ") + name + "='" + value + "': " + e.what());
  }
}

std::optional<std::uint64_t> env_cuda_page_bytes() {
  const char* value = get("GPUMEM_CUDA_PAGE_MIB");
  if (!value) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long mib = std::strtoull(value, &end, 10);
  if (*value < '0' || *value > '9' || *end || errno || mib == 0 || mib > (1ull << 20))
    throw Error(std::string("gpumem: GPUMEM_CUDA_PAGE_MIB='") + value + "' is not a whole number of MiB from 1 to 1048576");
  return std::uint64_t(mib) << 20;
}

bool env_switch(const char* name, bool absent) {
  const char* value = get(name);
  if (!value) return absent;
  if (const std::optional<bool> on = parse_switch(value)) return *on;
  throw Error(std::string("gpumem: ") + name + "='" + value + "' is neither on nor off (use " + kSwitchWords + ")");
}

bool env_map_ahead() { return env_switch("GPUMEM_MAP_AHEAD", true); }

void env_check_switches() {
  for (const char* name : kSwitchVariables) env_switch(name, true);
}

}  // namespace gpumem::api
