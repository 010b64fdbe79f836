// The bytes of a trace, whatever holds them: a plain file, a gzip file, or text already in memory.
//
// Contract: read() hands out the (decompressed) bytes in order and returns 0 at the end. A gzip file may
// hold several members one after another (`cat a.gz b.gz` is valid gzip); anything after the last member
// that is not another member is an error, not silently ignored as zlib's gzread does. Damage is reported
// only after every byte decoded before it was handed out, so the reader can name the line it hit.
// Errors are ByteSourceError (one sentence without the file name; the caller adds file and line);
// a source that cannot be opened at all throws TraceError naming the file.
#pragma once
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gpumem::trace {

class ByteSourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to `n` bytes into `out`; 0 at the end of the data. Throws ByteSourceError.
  virtual std::size_t read(char* out, std::size_t n) = 0;

  // A file, gzip when it starts with gzip's magic bytes, plain otherwise. Throws TraceError(path, 0, ...).
  static std::unique_ptr<ByteSource> open_file(const std::string& path);
  // Text in memory; it must outlive the source.
  static std::unique_ptr<ByteSource> from_text(std::string_view text);
};

}  // namespace gpumem::trace
