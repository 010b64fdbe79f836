// Plain and gzip trace files through one read(); gzip by zlib's inflate (not gzread), so that trailing
// garbage and the boundaries between members are ours to judge.
#include "trace/byte_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "gpumem/trace.hpp"

namespace gpumem::trace {
namespace {

constexpr std::size_t kInputBytes = std::size_t(256) << 10;

class TextSource final : public ByteSource {
 public:
  explicit TextSource(std::string_view text) : text_(text) {}
  std::size_t read(char* out, std::size_t n) override {
    const std::size_t take = std::min(n, text_.size());
    std::memcpy(out, text_.data(), take);
    text_.remove_prefix(take);
    return take;
  }

 private:
  std::string_view text_;
};

// An open file descriptor, read in kInputBytes pieces; `start` holds bytes already read (the magic).
class FileInput {
 public:
  FileInput(int fd, std::size_t already_read) : fd_(fd), offset_(already_read) {}
  ~FileInput() { ::close(fd_); }
  FileInput(const FileInput&) = delete;
  FileInput& operator=(const FileInput&) = delete;

  // Reads up to n bytes; 0 at the end of the file. Throws ByteSourceError on an I/O error.
  std::size_t read(unsigned char* out, std::size_t n) {
    for (;;) {
      const ssize_t got = ::read(fd_, out, n);
      if (got >= 0) {
        offset_ += std::size_t(got);
        return std::size_t(got);
      }
      if (errno != EINTR) throw ByteSourceError(std::string("cannot read the trace: ") + std::strerror(errno));
    }
  }
  std::size_t offset() const { return offset_; }  // bytes read so far
  // Size of the file, or 0 when it is not a regular file.
  std::size_t size() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) ? std::size_t(st.st_size) : 0;
  }

 private:
  int fd_;
  std::size_t offset_;
};

class PlainFile final : public ByteSource {
 public:
  PlainFile(int fd, std::string start) : file_(fd, start.size()), start_(std::move(start)) {}
  std::size_t read(char* out, std::size_t n) override {
    if (!start_.empty()) {
      const std::size_t take = std::min(n, start_.size());
      std::memcpy(out, start_.data(), take);
      start_.erase(0, take);
      return take;
    }
    return file_.read(reinterpret_cast<unsigned char*>(out), n);
  }

 private:
  FileInput file_;
  std::string start_;
};

class GzipFile final : public ByteSource {
 public:
  GzipFile(int fd, const std::string& start) : file_(fd, start.size()), input_(kInputBytes) {
    std::memcpy(input_.data(), start.data(), start.size());
    z_.next_in = input_.data();
    z_.avail_in = static_cast<uInt>(start.size());
    if (inflateInit2(&z_, 15 + 16) != Z_OK) throw std::bad_alloc();  // 15 + 16: gzip framing only
  }
  ~GzipFile() override { inflateEnd(&z_); }

  std::size_t read(char* out, std::size_t n) override {
    if (!deferred_.empty()) throw ByteSourceError(deferred_);
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(std::min<std::size_t>(n, UINT32_MAX));
    const uInt wanted = z_.avail_out;
    try {
      fill();
    } catch (const ByteSourceError& e) {
      if (z_.avail_out == wanted) throw;
      deferred_ = e.what();  // hand out what was decoded first, so the damaged line gets its number
    }
    return wanted - z_.avail_out;
  }

 private:
  void fill() {
    while (z_.avail_out > 0) {
      if (z_.avail_in == 0 && !at_eof_) {
        z_.next_in = input_.data();
        z_.avail_in = static_cast<uInt>(file_.read(input_.data(), input_.size()));
        at_eof_ = z_.avail_in == 0;
      }
      if (between_members_) {
        if (z_.avail_in == 0) return;  // the end: every member was complete
        if (z_.next_in[0] != 0x1f) garbage();
        inflateReset(&z_);
        between_members_ = false;
      }
      if (z_.avail_in == 0) throw corrupt("unexpected end of file");
      const int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        between_members_ = true;
      } else if (rc == Z_MEM_ERROR) {
        throw std::bad_alloc();
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw corrupt(z_.msg ? z_.msg : "zlib error " + std::to_string(rc));
      }
    }
  }

  static ByteSourceError corrupt(const std::string& why) {
    return ByteSourceError("the compressed data is corrupt or truncated (" + why + ")");
  }

  [[noreturn]] void garbage() {
    const std::size_t at = file_.offset() - z_.avail_in;
    const std::size_t size = file_.size();
    const std::string count = size > at ? std::to_string(size - at) + " bytes" : "the bytes";
    throw ByteSourceError(count + " after the end of the gzip data (at byte " + std::to_string(at) +
                          ") are not gzip data: the file is damaged or has something appended");
  }

  FileInput file_;
  std::vector<unsigned char> input_;
  z_stream z_{};
  bool at_eof_ = false;
  bool between_members_ = false;
  std::string deferred_;
};

}  // namespace

std::unique_ptr<ByteSource> ByteSource::from_text(std::string_view text) { return std::make_unique<TextSource>(text); }

std::unique_ptr<ByteSource> ByteSource::open_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw TraceError(path, 0, std::string("cannot open the trace: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw TraceError(path, 0, "is a directory, not a trace file");
  }
  // The first two bytes decide: gzip's magic, or plain text.
  std::string start(2, '\0');
  std::size_t have = 0;
  while (have < start.size()) {
    const ssize_t got = ::read(fd, start.data() + have, start.size() - have);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      throw TraceError(path, 0, std::string("cannot read the trace: ") + std::strerror(err));
    }
    if (got == 0) break;
    have += std::size_t(got);
  }
  start.resize(have);
  if (have == 2 && static_cast<unsigned char>(start[0]) == 0x1f && static_cast<unsigned char>(start[1]) == 0x8b)
    return std::make_unique<GzipFile>(fd, start);
  return std::make_unique<PlainFile>(fd, start);
}

}  // namespace gpumem::trace
