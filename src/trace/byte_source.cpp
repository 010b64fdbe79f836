// Plain and gzip trace files through one read(); gzip by zlib's inflate (not gzread), so that trailing
// garbage and the boundaries between members are ours to judge.
#include "trace/byte_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
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

// A file descriptor read from its start with pread, so that several readers can share it.
class FileInput {
 public:
  explicit FileInput(int fd) : fd_(fd) {}

  // Reads up to n bytes; 0 at the end of the file. Throws ByteSourceError on an I/O error.
  std::size_t read(unsigned char* out, std::size_t n) {
    for (;;) {
      const ssize_t got = ::pread(fd_, out, n, off_t(offset_));
      if (got >= 0) {
        offset_ += std::size_t(got);
        return std::size_t(got);
      }
      if (errno != EINTR) throw ByteSourceError(std::string("cannot read the trace: ") + std::strerror(errno));
    }
  }
  std::size_t offset() const { return offset_; }  // bytes read so far
  std::size_t size() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 ? std::size_t(st.st_size) : 0;
  }

 private:
  int fd_;
  std::size_t offset_ = 0;
};

class PlainFile final : public ByteSource {
 public:
  explicit PlainFile(int fd) : file_(fd) {}
  std::size_t read(char* out, std::size_t n) override { return file_.read(reinterpret_cast<unsigned char*>(out), n); }

 private:
  FileInput file_;
};

class GzipFile final : public ByteSource {
 public:
  explicit GzipFile(int fd) : file_(fd), input_(kInputBytes) {
    if (inflateInit2(&z_, 15 + 16) != Z_OK) throw std::bad_alloc();  // 15 + 16: gzip framing only
  }
  ~GzipFile() override { inflateEnd(&z_); }

  std::size_t read(char* out, std::size_t n) override {
    if (!deferred_.empty()) {
      if (deferred_truncated_) throw TruncatedError(deferred_);
      throw ByteSourceError(deferred_);
    }
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(std::min<std::size_t>(n, UINT32_MAX));
    const uInt wanted = z_.avail_out;
    try {
      fill();
    } catch (const ByteSourceError& e) {
      if (z_.avail_out == wanted) throw;
      deferred_ = e.what();  // hand out what was decoded first, so the damaged line gets its number
      deferred_truncated_ = dynamic_cast<const TruncatedError*>(&e) != nullptr;
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
      if (z_.avail_in == 0) throw TruncatedError("the compressed data ends mid-stream");
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
  bool deferred_truncated_ = false;
};

}  // namespace

std::unique_ptr<ByteSource> ByteSource::from_text(std::string_view text) { return std::make_unique<TextSource>(text); }

namespace {

[[noreturn]] void cannot(const std::string& path, const char* what, int err) {
  throw TraceError(path, 0, std::string(what) + std::strerror(err));
}

// Whether a stream that starts with `head` can be a trace: gzip's magic bytes, or text whose first
// character after white space opens the JSON header line. -1 while `head` is too short to tell.
constexpr std::size_t kHeadBytes = 65536;  // white space beyond this before the header: not a trace
int starts_like_trace(std::string_view head) {
  if (!head.empty() && static_cast<unsigned char>(head[0]) == 0x1f)
    return head.size() < 2 ? -1 : static_cast<unsigned char>(head[1]) == 0x8b;
  const std::size_t first = head.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return head.size() < kHeadBytes ? -1 : 0;
  return head[first] == '{';
}

// Copies a stream to an unlinked temporary file; returns its descriptor. A stream that does not start
// like a trace is refused at once: `gpumem replay /dev/zero` would otherwise fill the disk first.
int spool(int in, const std::string& path) {
  const char* dir = std::getenv("TMPDIR");
  std::string name = std::string(dir && *dir ? dir : "/tmp") + "/gpumem-trace-XXXXXX";
  const int out = ::mkstemp(name.data());
  if (out < 0) cannot(path, "cannot copy the stream to a temporary file: ", errno);
  ::unlink(name.c_str());
  std::vector<char> buffer(kInputBytes);
  std::string head;  // the first bytes, until starts_like_trace() can tell
  int verdict = -1;
  for (;;) {
    ssize_t got = ::read(in, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(out);
      cannot(path, "cannot read the trace: ", err);
    }
    if (got == 0) return out;
    if (verdict < 0) {
      head.append(buffer.data(), std::min(std::size_t(got), kHeadBytes - head.size()));
      verdict = starts_like_trace(head);
      if (verdict == 0) {
        ::close(out);
        throw TraceError(path, 1, "not a gpumem-trace file: it starts with neither gzip's magic bytes nor a JSON header line");
      }
    }
    for (ssize_t done = 0; done < got;) {
      const ssize_t put = ::write(out, buffer.data() + done, std::size_t(got - done));
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) {
        const int err = put < 0 ? errno : ENOSPC;
        ::close(out);
        cannot(path, "cannot copy the stream to a temporary file: ", err);
      }
      done += put;
    }
  }
}

}  // namespace

TraceFile::TraceFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) cannot(path, "cannot open the trace: ", errno);
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw TraceError(path, 0, "is a directory, not a trace file");
  }
  if (S_ISREG(st.st_mode)) {
    fd_ = fd;
  } else {
    try {
      fd_ = spool(fd, path);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }
  // The first two bytes decide: gzip's magic, or plain text.
  unsigned char magic[2] = {};
  ssize_t got;
  do got = ::pread(fd_, magic, sizeof magic, 0);
  while (got < 0 && errno == EINTR);
  if (got < 0) {
    const int err = errno;
    ::close(fd_);
    cannot(path, "cannot read the trace: ", err);
  }
  gzip_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

TraceFile::~TraceFile() { ::close(fd_); }

std::unique_ptr<ByteSource> TraceFile::open() const {
  if (gzip_) return std::make_unique<GzipFile>(fd_);
  return std::make_unique<PlainFile>(fd_);
}

}  // namespace gpumem::trace
