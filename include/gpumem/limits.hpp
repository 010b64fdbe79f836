// One check for the memory caps users give (--limit / GPUMEM_LIMIT, --fraction / GPUMEM_FRACTION,
// gpumem_set_limit / gpumem_set_fraction). "No limit" is spelled `none` (GPUMEM_LIMIT=none,
// --limit none) or a limit of 0 through the C++/C API; a cap below one page (2 MiB, the CUDA backend's
// smallest) is an error, never rounded to "no limit". Every function throws std::invalid_argument with
// one sentence.
#pragma once
#include <cstdint>
#include <string_view>

namespace gpumem {

inline constexpr std::uint64_t kMinLimitBytes = std::uint64_t(2) << 20;
// Above this (1 EiB) a limit is a typing error, not a device: refused rather than shown as a wrapped number.
inline constexpr std::uint64_t kMaxLimitBytes = std::uint64_t(1) << 60;
// Below this a fraction is less than a page on every GPU worth capping; the allocator checks the exact
// page against the device's real size.
inline constexpr double kMinFraction = 1e-4;

// A size (parse_size) or "none" (returns 0). 0 itself, anything below kMinLimitBytes and above
// kMaxLimitBytes are refused.
std::uint64_t parse_limit(std::string_view text);
// "none" in any case: the spelling of no limit wherever a limit is read.
bool means_no_limit(std::string_view text) noexcept;
// A plain decimal number in [kMinFraction, 1].
double parse_fraction(std::string_view text);

// What `gpumem limit` and top's limit prompt take: a fraction of the device written with a point ("0.5",
// "1.0"), or a size ("8GiB", "512MiB"; 0 removes the limit). The same text means the same in both.
struct LimitAmount {
  bool fraction = false;
  double share = 0;         // when fraction
  std::uint64_t bytes = 0;  // otherwise; 0: no limit
};
LimitAmount parse_limit_amount(std::string_view text);

}  // namespace gpumem
