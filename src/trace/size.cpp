// parse_size: "16GiB", "1.5GB", "512MiB", "4096". Exact integer arithmetic (no floating point), so
// "1.5GiB" is exactly 1610612736 bytes.
#include <cctype>
#include <stdexcept>
#include <string>

#include "gpumem/limits.hpp"
#include "gpumem/trace.hpp"

#include <cstdlib>

namespace gpumem {
namespace {

struct Unit {
  const char* name;
  std::uint64_t bytes;
};
constexpr Unit kUnits[] = {
    {"", 1},
    {"b", 1},
    {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
    {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000000ull},
    {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000ull},
    {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull},
};

[[noreturn]] void bad(std::string_view text, const std::string& why) {
  throw std::invalid_argument("invalid size \"" + std::string(text) + "\": " + why);
}

}  // namespace

std::uint64_t parse_size(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && text[i] == ' ') ++i;
  if (i == text.size()) bad(text, "it is empty; expected bytes or a number with a unit such as 16GiB");
  if (text[i] == '-') bad(text, "a size cannot be negative");
  if (text[i] == '+') ++i;
  // mantissa as an integer plus a count of decimal places
  unsigned __int128 mantissa = 0;
  unsigned decimals = 0, digits = 0;
  bool point = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.' && !point) {
      point = true;
    } else if (c >= '0' && c <= '9') {
      if (digits >= 25) bad(text, "too many digits");
      mantissa = mantissa * 10 + unsigned(c - '0');
      ++digits;
      if (point) ++decimals;
    } else {
      break;
    }
  }
  if (digits == 0) bad(text, "it does not start with a number");
  while (i < text.size() && text[i] == ' ') ++i;
  std::string unit;
  for (; i < text.size(); ++i) unit += char(std::tolower(static_cast<unsigned char>(text[i])));
  while (!unit.empty() && unit.back() == ' ') unit.pop_back();
  std::uint64_t scale = 0;
  for (const Unit& u : kUnits) {
    if (unit == u.name) scale = u.bytes;
  }
  if (scale == 0) bad(text, "unknown unit \"" + unit + "\" (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  unsigned __int128 bytes = mantissa * scale, whole = bytes;
  for (unsigned d = 0; d < decimals; ++d) bytes /= 10;
  unsigned __int128 back = bytes;
  for (unsigned d = 0; d < decimals; ++d) back *= 10;
  // Below a unit the bytes are rounded down ("1.3GiB"); a byte count itself must be whole, and a size
  // that rounds to nothing is refused: "0.5B" read as 0 would mean "no limit".
  if (scale == 1 && back != whole) bad(text, "a byte count is a whole number");
  if (bytes == 0 && mantissa != 0) bad(text, "it is less than one byte");
  if (bytes > UINT64_MAX) bad(text, "it is larger than 2^64-1 bytes");
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace gpumem

namespace gpumem {

namespace {
// A limit of `bytes` (not 0) must lie between one page and 1 EiB; `no_limit` says how to write none.
void check_limit_bytes(std::uint64_t bytes, std::string_view text, const char* no_limit) {
  if (bytes < kMinLimitBytes)
    throw std::invalid_argument("a limit of " + std::to_string(bytes) + " bytes is below one page (2 MiB); " + no_limit);
  if (bytes > kMaxLimitBytes)
    throw std::invalid_argument("a limit of " + std::string(text) + " is above 1 EiB, more than any device; " + no_limit);
}
}  // namespace

bool means_no_limit(std::string_view text) noexcept {
  constexpr std::string_view none = "none";
  if (text.size() != none.size()) return false;
  for (std::size_t i = 0; i < none.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(text[i])) != none[i]) return false;
  return true;
}

std::uint64_t parse_limit(std::string_view text) {
  if (means_no_limit(text)) return 0;
  const std::uint64_t bytes = parse_size(text);
  check_limit_bytes(bytes, text, "write 'none' for no limit");
  return bytes;
}

double parse_fraction(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  const double f = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !(f > 0.0 && f <= 1.0))
    throw std::invalid_argument("fraction '" + s + "' is not a number in (0, 1]");
  if (f < kMinFraction)
    throw std::invalid_argument("fraction " + s + " is below 0.0001, less than a page of any GPU; use --limit none or unset it for no limit");
  return f;
}

LimitAmount parse_limit_amount(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  LimitAmount a;
  if (means_no_limit(text)) return a;  // as run's --limit none
  const bool fraction_shaped = !text.empty() && text.find_first_not_of("0123456789.") == std::string_view::npos &&
                               text.find('.') != std::string_view::npos;
  if (fraction_shaped) {
    const std::string s(text);
    char* end = nullptr;
    a.share = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !(a.share > 0 && a.share <= 1))
      throw std::invalid_argument("a fraction of the device is a number in (0, 1], not '" + s + "'");
    if (a.share < kMinFraction)  // as parse_fraction: a later allocator would refuse it on every allocation
      throw std::invalid_argument("fraction " + s + " is below 0.0001, less than a page of any GPU; 0 or none removes the limit");
    a.fraction = true;
    return a;
  }
  a.bytes = parse_size(text);
  if (a.bytes != 0) check_limit_bytes(a.bytes, text, "0 or none removes the limit");
  return a;
}

}  // namespace gpumem
