// A streaming Python pickle writer (protocol 2 opcodes, read by every Python 3): dicts, lists, tuples,
// str, int, float, bool and None, written straight to a stream as they come, so a large document is
// never held in memory twice. Containers are opened and closed explicitly; inside a dict, key() and
// the value alternate. Items are flushed in batches of 1000, as Python's own pickler does.
// Misuse (a value where a key is due, closing what is not open) throws std::logic_error.
#pragma once
#include <cstdint>
#include <ostream>
#include <string_view>
#include <vector>

namespace gpumem::report {

class PickleWriter {
 public:
  explicit PickleWriter(std::ostream& out);

  void begin_dict();
  void end_dict();
  void begin_list();
  void end_list();
  void key(std::string_view k) { str(k); }

  void str(std::string_view s);
  void integer(std::int64_t v);
  void unsigned_integer(std::uint64_t v);
  void number(double v);
  void boolean(bool v);
  void none();
  void tuple2_int(std::int64_t a, std::int64_t b);

  // Writes the STOP opcode; every container must be closed. The stream's state tells if it was written.
  void finish();

 private:
  struct Open {
    bool dict;
    std::size_t pending;  // items (dict: keys + values) since the last MARK
  };
  void before_value();
  void value_done();
  void put(char c) { out_.put(c); }
  void put_le(std::uint64_t v, int bytes);

  std::ostream& out_;
  std::vector<Open> open_;
  bool finished_ = false;
  bool have_root_ = false;
};

}  // namespace gpumem::report
