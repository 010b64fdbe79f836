// printable(): text from outside (process names and command lines, trace headers, file names) made safe
// for a terminal. Control characters (C0, DEL, C1) are shown as escapes (\n, \t, \r, \e, \xNN), as are
// bytes that are not UTF-8, so a name cannot clear the screen, move the cursor or forge an output line.
// Valid UTF-8 text without control characters comes back unchanged. JSON output needs no such step: the
// CLI's one JSON writer (src/cli/output.hpp) replaces bytes that are not UTF-8; valid_utf8() does the same
// for other machine-read text (Prometheus label values).
#pragma once
#include <cstdio>
#include <string>
#include <string_view>

namespace gpumem {

// The length of the UTF-8 character at text[i] and its code point; 0 when the bytes there are not one
// (a stray continuation byte, an overlong form, a surrogate, a truncated sequence).
inline std::size_t utf8_char_at(std::string_view text, std::size_t i, char32_t& cp) {
  const auto c = static_cast<unsigned char>(text[i]);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  const std::size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
  bool valid = len != 0 && i + len <= text.size();
  for (std::size_t k = 1; valid && k < len; ++k) {
    const auto cc = static_cast<unsigned char>(text[i + k]);
    valid = (cc & 0xc0) == 0x80;
    cp = (cp << 6) | (cc & 0x3f);
  }
  valid = valid && !(len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) && !(len == 4 && (cp < 0x10000 || cp > 0x10ffff));
  return valid ? len : 0;
}

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
    char32_t cp = 0;
    const std::size_t len = utf8_char_at(text, i, cp);
    if (len == 0) {
      escape(static_cast<unsigned char>(text[i]));
      ++i;
    } else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {  // C0, DEL, C1 (8-bit CSI and friends)
      escape(static_cast<unsigned char>(cp));
      i += len;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

// `text` with every byte that is not part of a UTF-8 character replaced by U+FFFD, as JSON writers and
// Prometheus need; everything else (control characters included) unchanged.
inline std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const std::size_t len = utf8_char_at(text, i, cp);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace gpumem
