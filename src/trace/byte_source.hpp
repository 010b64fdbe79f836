// The bytes of a trace, whatever holds them: a plain file, a gzip file, or text already in memory.
//
// Contract: read() hands out the (decompressed) bytes in order and returns 0 at the end. A gzip file may
// hold several members one after another (`cat a.gz b.gz` is valid gzip); anything after the last member
// that is not another member is an error, not silently ignored as zlib's gzread does. Damage is reported
// only after every byte decoded before it was handed out, so the reader can name the line it hit.
// Errors are ByteSourceError (one sentence without the file name; the caller adds file and line);
// a file that cannot be opened at all is a TraceError naming it.
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

// The gzip data stops before its stream ends: the file was cut, as a process killed while it wrote its
// trace leaves it. Thrown only once every byte decoded before the cut was handed out.
class TruncatedError : public ByteSourceError {
 public:
  using ByteSourceError::ByteSourceError;
};

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to `n` bytes into `out`; 0 at the end of the data. Throws ByteSourceError.
  virtual std::size_t read(char* out, std::size_t n) = 0;

  // Text in memory; it must outlive the source.
  static std::unique_ptr<ByteSource> from_text(std::string_view text);
};

// An open trace file that can be read from its first byte any number of times (a replay reads it more
// than once): a pipe or other stream (`<(zcat ...)`) is first copied to an unlinked temporary file.
class TraceFile {
 public:
  explicit TraceFile(const std::string& path);  // throws TraceError(path, 0, ...)
  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  // A new source from the first byte: gzip when the file starts with gzip's magic bytes, plain otherwise.
  std::unique_ptr<ByteSource> open() const;

 private:
  int fd_ = -1;
  bool gzip_ = false;
};

}  // namespace gpumem::trace
