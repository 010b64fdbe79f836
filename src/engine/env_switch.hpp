// One spelling for the on/off GPUMEM_* variables (GPUMEM_MAP_AHEAD, GPUMEM_CONTROL, GPUMEM_COOPERATIVE):
// 1/0, true/false, yes/no, on/off, in any case. Header-only: the backends, the control channel and the API
// all read such variables. api/env_config.hpp turns a malformed value into an error naming the variable.
#pragma once
#include <optional>
#include <string_view>

namespace gpumem {

// true / false for a switch word; nullopt for anything else (the empty string included).
inline std::optional<bool> parse_switch(std::string_view text) {
  auto is = [&](std::string_view word) {
    if (text.size() != word.size()) return false;
    for (std::size_t i = 0; i < word.size(); ++i) {
      char c = text[i];
      if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
      if (c != word[i]) return false;
    }
    return true;
  };
  for (std::string_view on : {"1", "true", "yes", "on"})
    if (is(on)) return true;
  for (std::string_view off : {"0", "false", "no", "off"})
    if (is(off)) return false;
  return std::nullopt;
}

inline constexpr const char* kSwitchWords = "1/0, true/false, yes/no or on/off";

}  // namespace gpumem
