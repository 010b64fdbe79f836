#include "trace/event_parser.hpp"

#include <cstdio>
#include <cstring>

namespace gpumem::trace {
namespace {

enum Field : int { kT, kOp, kAddr, kSize, kStream, kUnknown };
constexpr const char* kFieldNames[] = {"t", "op", "addr", "size", "stream"};

Field field_of(std::string_view key) {
  switch (key.size()) {
    case 1: return key == "t" ? kT : kUnknown;
    case 2: return key == "op" ? kOp : kUnknown;
    case 4: return key == "addr" ? kAddr : key == "size" ? kSize : kUnknown;
    case 6: return key == "stream" ? kStream : kUnknown;
    default: return kUnknown;
  }
}

bool op_of(std::string_view name, Op& op) {
  static constexpr std::pair<std::string_view, Op> kOps[] = {
      {"alloc", Op::alloc},
      {"free", Op::free},
      {"free_completed", Op::free_completed},
      {"segment_alloc", Op::segment_alloc},
      {"segment_free", Op::segment_free},
      {"segment_map", Op::segment_map},
      {"segment_unmap", Op::segment_unmap},
  };
  for (const auto& [n, o] : kOps) {
    if (n == name) {
      op = o;
      return true;
    }
  }
  return false;
}

// A cursor over one line; every method fails softly by returning false and setting `problem`.
class Cursor {
 public:
  Cursor(std::string_view text, std::string& problem) : p_(text.data()), end_(p_ + text.size()), problem_(problem) {}

  void skip_ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r')) ++p_;
  }
  bool at_end() const { return p_ == end_; }
  bool peek(char c) const { return p_ != end_ && *p_ == c; }
  bool expect(char c, const char* where) {
    if (peek(c)) {
      ++p_;
      return true;
    }
    return fail(std::string("expected '") + c + "' " + where + found());
  }
  bool fail(std::string problem) {
    problem_ = std::move(problem);
    return false;
  }
  // What stands at the cursor, for messages.
  std::string found() const {
    if (p_ == end_) return " but the line ends (truncated?)";
    return " but found '" + printable_excerpt(std::string_view(p_, end_ - p_), 16) + "'";
  }

  // A JSON string without its quotes; escapes are kept raw (keys and ops never need them).
  bool string(std::string_view& out) {
    if (!expect('"', "to open a string")) return false;
    const char* start = p_;
    while (p_ != end_ && *p_ != '"') {
      if (*p_ == '\\' && p_ + 1 != end_) ++p_;
      ++p_;
    }
    if (p_ == end_) return fail("a string is not closed (truncated line?)");
    out = std::string_view(start, p_ - start);
    ++p_;
    return true;
  }

  // A non-negative JSON integer that fits in 64 bits.
  bool unsigned_integer(const char* field, std::uint64_t& out) {
    if (peek('-')) return fail(std::string("negative ") + field);
    if (p_ == end_ || *p_ < '0' || *p_ > '9') return fail(std::string("field \"") + field + "\" is not a number" + found());
    if (*p_ == '0' && p_ + 1 != end_ && p_[1] >= '0' && p_[1] <= '9')
      return fail(std::string("field \"") + field + "\" has a leading zero (not a JSON number)");
    std::uint64_t value = 0;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
      const std::uint64_t digit = std::uint64_t(*p_ - '0');
      if (value > (UINT64_MAX - digit) / 10) return fail(std::string("field \"") + field + "\" does not fit in 64 bits");
      value = value * 10 + digit;
      ++p_;
    }
    if (p_ != end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E'))
      return fail(std::string("field \"") + field + "\" is not a whole number");
    out = value;
    return true;
  }

  // Skips one scalar JSON value (string, number, true, false, null) of a field we do not use.
  bool skip_scalar(std::string_view key) {
    if (peek('"')) {
      std::string_view ignored;
      return string(ignored);
    }
    const char* start = p_;
    while (p_ != end_ && *p_ != '\0' && std::strchr("+-.0123456789eEtruefalsn", *p_) != nullptr) ++p_;
    const std::string_view word(start, p_ - start);
    if (word.empty() || (word[0] >= 'a' && word != "true" && word != "false" && word != "null") ||
        (word[0] < 'a' && !json_number(word)))
      return fail("field \"" + printable_excerpt(key) + "\" has a value that is not a plain JSON scalar");
    return true;
  }

  // RFC 8259: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  static bool json_number(std::string_view w) {
    std::size_t i = 0;
    auto digits = [&] {
      const std::size_t from = i;
      while (i < w.size() && w[i] >= '0' && w[i] <= '9') ++i;
      return i - from;
    };
    if (i < w.size() && w[i] == '-') ++i;
    if (i < w.size() && w[i] == '0') ++i;
    else if (digits() == 0) return false;
    if (i < w.size() && w[i] == '.' && (++i, digits() == 0)) return false;
    if (i < w.size() && (w[i] == 'e' || w[i] == 'E')) {
      ++i;
      if (i < w.size() && (w[i] == '+' || w[i] == '-')) ++i;
      if (digits() == 0) return false;
    }
    return i == w.size();
  }

 private:
  const char* p_;
  const char* end_;
  std::string& problem_;
};

}  // namespace

std::string printable_excerpt(std::string_view text, std::size_t limit) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (text.size() > limit) out += "...";
  return out;
}

bool parse_event_line(std::string_view line, Event& event, std::string& problem) {
  Cursor in(line, problem);
  in.skip_ws();
  if (!in.expect('{', "at the start of an event")) return false;
  unsigned seen = 0;
  in.skip_ws();
  if (in.peek('}')) return in.fail("the event object is empty");
  for (;;) {
    std::string_view key;
    if (!in.string(key)) return false;
    in.skip_ws();
    if (!in.expect(':', "after a field name")) return false;
    in.skip_ws();
    const Field field = field_of(key);
    if (field != kUnknown) {
      if (seen & (1u << field)) return in.fail(std::string("field \"") + kFieldNames[field] + "\" appears twice");
      seen |= 1u << field;
    }
    bool ok = true;
    switch (field) {
      case kT: ok = in.unsigned_integer("t", event.t); break;
      case kAddr: ok = in.unsigned_integer("addr", event.addr); break;
      case kSize: ok = in.unsigned_integer("size", event.size); break;
      case kStream: ok = in.unsigned_integer("stream", event.stream); break;
      case kOp: {
        if (!in.peek('"')) return in.fail("field \"op\" is not a string" + in.found());
        std::string_view name;
        ok = in.string(name);
        if (ok && !op_of(name, event.op)) return in.fail("unknown op \"" + printable_excerpt(name) + "\"");
        break;
      }
      case kUnknown: ok = in.skip_scalar(key); break;
    }
    if (!ok) return false;
    in.skip_ws();
    if (in.peek(',')) {
      in.expect(',', "");
      in.skip_ws();
      continue;
    }
    if (!in.expect('}', "or ',' after a field")) return false;
    break;
  }
  in.skip_ws();
  if (!in.at_end()) return in.fail("unexpected text after the event object" + in.found());
  for (int f = kT; f <= kStream; ++f) {
    if (!(seen & (1u << f))) return in.fail(std::string("missing field \"") + kFieldNames[f] + "\"");
  }
  return true;
}

}  // namespace gpumem::trace
