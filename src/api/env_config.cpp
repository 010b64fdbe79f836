#include "api/env_config.hpp"

#include <cstdlib>
#include <stdexcept>

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

}  // namespace gpumem::api
