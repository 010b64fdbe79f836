// printable(): text from outside (process names and command lines, trace headers, file names) made safe
// for a terminal. Control characters (C0, DEL, C1) are shown as escapes (\n, \t, \r, \e, \xNN), as are
// bytes that are not UTF-8, so a name cannot clear the screen, move the cursor or forge an output line.
// Valid UTF-8 text without control characters comes back unchanged. JSON output needs no such step: the
// CLI's one JSON writer (src/cli/output.hpp) replaces bytes that are not UTF-8.
#pragma once
#include <cstdio>
#include <string>
#include <string_view>

namespace gpumem {

inline std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto escape = [&out](unsigned char c) {
    switch (c) {
      case '\n': out += "\\n"; return;
      case '\t': out += "\\t"; return;
      case '\r': out += "\\r"; return;
      case 0x1b: out += "\\e"; return;
      default: {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      }
    }
  };
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) escape(c);
      else out += char(c);
      ++i;
      continue;
    }
    // Length and smallest code point of a UTF-8 sequence led by c; 0 for a byte that cannot lead one.
    const std::size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    char32_t cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    bool valid = len != 0 && i + len <= text.size();
    for (std::size_t k = 1; valid && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      valid = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3f);
    }
    valid = valid && !(len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) && !(len == 4 && (cp < 0x10000 || cp > 0x10ffff));
    if (!valid) {
      escape(c);
      ++i;
    } else if (cp >= 0x80 && cp <= 0x9f) {  // C1 controls: 8-bit CSI and friends
      escape(static_cast<unsigned char>(cp));
      i += len;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace gpumem
