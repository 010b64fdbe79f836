#include <cstdio>
#include <string>

#include "gpumem/errors.hpp"

namespace gpumem {

std::string format_bytes(std::size_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = double(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", value, units[unit]);
  return buf;
}

}  // namespace gpumem
