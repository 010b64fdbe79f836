// Fuzz target: the size, limit and fraction parsers. They return or throw std::invalid_argument; a
// returned limit is never below one page and a returned fraction is in [kMinFraction, 1].
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "fuzz/fuzz_target.hpp"
#include "gpumem/limits.hpp"
#include "gpumem/trace.hpp"

GPUMEM_FUZZ_SEEDS({"16GiB", "1.5GB", "512MiB", "4096", " 7 kb ", "none", "0.5", "1e-300", "18446744073709551615",
                   "18446744073709551616", "0.0000000001TiB", "+3T", "-1"})

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    gpumem::parse_size(text);
  } catch (const std::invalid_argument&) {
  }
  try {
    const std::uint64_t limit = gpumem::parse_limit(text);
    if (limit != 0 && limit < gpumem::kMinLimitBytes) std::abort();
  } catch (const std::invalid_argument&) {
  }
  try {
    const double f = gpumem::parse_fraction(text);
    if (!(f >= gpumem::kMinFraction && f <= 1.0)) std::abort();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
