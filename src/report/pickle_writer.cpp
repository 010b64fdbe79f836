#include "report/pickle_writer.hpp"

#include <bit>
#include <cstring>
#include <stdexcept>

namespace gpumem::report {
namespace {
// Opcodes of pickle protocol 2 (Lib/pickle.py).
constexpr char kProto = '\x80', kStop = '.', kMark = '(', kEmptyDict = '}', kSetItems = 'u', kEmptyList = ']',
               kAppends = 'e', kBinUnicode = 'X', kBinInt1 = 'K', kBinInt2 = 'M', kBinInt = 'J', kLong1 = '\x8a',
               kBinFloat = 'G', kNewTrue = '\x88', kNewFalse = '\x89', kNone = 'N', kTuple2 = '\x86';
constexpr std::size_t kBatch = 1000;
}  // namespace

PickleWriter::PickleWriter(std::ostream& out) : out_(out) {
  put(kProto);
  put(2);
}

void PickleWriter::put_le(std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) put(char((v >> (8 * i)) & 0xff));
}

void PickleWriter::before_value() {
  if (finished_) throw std::logic_error("pickle: value after finish()");
  if (open_.empty()) {
    if (have_root_) throw std::logic_error("pickle: a second top-level value");
    have_root_ = true;
  }
}

// After a complete value: a full batch (a list's items, a dict's key/value pairs) goes to the container.
void PickleWriter::value_done() {
  if (open_.empty()) return;
  Open& o = open_.back();
  ++o.pending;
  if (o.pending >= kBatch && (!o.dict || o.pending % 2 == 0)) {
    put(o.dict ? kSetItems : kAppends);
    put(kMark);
    o.pending = 0;
  }
}

void PickleWriter::begin_dict() {
  before_value();
  put(kEmptyDict);
  put(kMark);
  open_.push_back({true, 0});
}

void PickleWriter::begin_list() {
  before_value();
  put(kEmptyList);
  put(kMark);
  open_.push_back({false, 0});
}

void PickleWriter::end_dict() {
  if (open_.empty() || !open_.back().dict) throw std::logic_error("pickle: end_dict() without an open dict");
  if (open_.back().pending % 2) throw std::logic_error("pickle: a dict key without a value");
  put(kSetItems);  // with nothing since the MARK it adds nothing
  open_.pop_back();
  value_done();
}

void PickleWriter::end_list() {
  if (open_.empty() || open_.back().dict) throw std::logic_error("pickle: end_list() without an open list");
  put(kAppends);
  open_.pop_back();
  value_done();
}

void PickleWriter::str(std::string_view s) {
  before_value();
  put(kBinUnicode);
  put_le(s.size(), 4);
  out_.write(s.data(), std::streamsize(s.size()));
  value_done();
}

void PickleWriter::integer(std::int64_t v) {
  before_value();
  if (v >= 0 && v < 256) {
    put(kBinInt1);
    put_le(std::uint64_t(v), 1);
  } else if (v >= 0 && v < 65536) {
    put(kBinInt2);
    put_le(std::uint64_t(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    put(kBinInt);
    put_le(std::uint64_t(std::uint32_t(std::int32_t(v))), 4);
  } else {
    // LONG1: little-endian two's complement, as few bytes as keep the sign.
    std::uint64_t u = std::uint64_t(v);
    int n = 8;
    while (n > 1) {
      std::uint8_t top = std::uint8_t(u >> (8 * (n - 1))), next = std::uint8_t(u >> (8 * (n - 2)));
      bool redundant = (top == 0x00 && !(next & 0x80)) || (top == 0xff && (next & 0x80));
      if (!redundant) break;
      --n;
    }
    put(kLong1);
    put(char(n));
    put_le(u, n);
  }
  value_done();
}

void PickleWriter::unsigned_integer(std::uint64_t v) {
  if (v <= std::uint64_t(INT64_MAX)) return integer(std::int64_t(v));
  before_value();
  put(kLong1);
  put(char(9));  // the 9th byte (0) keeps it positive
  put_le(v, 8);
  put(0);
  value_done();
}

void PickleWriter::number(double v) {
  before_value();
  put(kBinFloat);
  std::uint64_t bits = std::bit_cast<std::uint64_t>(v);
  for (int i = 7; i >= 0; --i) put(char((bits >> (8 * i)) & 0xff));  // big-endian
  value_done();
}

void PickleWriter::boolean(bool v) {
  before_value();
  put(v ? kNewTrue : kNewFalse);
  value_done();
}

void PickleWriter::none() {
  before_value();
  put(kNone);
  value_done();
}

void PickleWriter::tuple2_int(std::int64_t a, std::int64_t b) {
  before_value();
  if (open_.empty()) have_root_ = false;  // the items below count as parts of the tuple, not roots
  open_.push_back({false, 0});
  integer(a);
  integer(b);
  open_.pop_back();
  put(kTuple2);
  if (open_.empty()) have_root_ = true;
  value_done();
}

void PickleWriter::finish() {
  if (!open_.empty()) throw std::logic_error("pickle: finish() with a container still open");
  if (!have_root_) throw std::logic_error("pickle: finish() without a value");
  if (!finished_) put(kStop);
  finished_ = true;
}

}  // namespace gpumem::report
