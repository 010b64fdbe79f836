#include "gpumem/trace_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

namespace gpumem::trace {
namespace {
constexpr std::size_t kBufferBytes = std::size_t(1) << 20;  // handed to the compressor when this full
constexpr std::size_t kMaxQueued = 8;                       // buffers waiting for it before write() waits

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// condition_variable::wait(unique_lock&) needs GLIBCXX_3.4.30, newer than the libstdc++ the packages
// declare; wait_for does not.
template <typename Predicate>
void wait_until_ready(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Predicate ready) {
  while (!cv.wait_for(lock, std::chrono::seconds(1), ready)) {
  }
}

bool write_all(void* file, const std::string& text) {
  return text.empty() || gzwrite(static_cast<gzFile>(file), text.data(), unsigned(text.size())) == int(text.size());
}
}  // namespace

struct TraceWriter::Compressor {
  struct Buffer {
    std::string text;
    bool sync;  // flush the file after it (gzip: Z_SYNC_FLUSH), so that it is readable up to here
  };
  std::mutex mutex;
  std::condition_variable queued, taken;
  std::deque<Buffer> queue;
  bool closing = false, failed = false;
  std::thread thread;

  explicit Compressor(void* file) : thread([this, file] { run(file); }) {}

  void run(void* file) {
    std::unique_lock lock(mutex);
    while (true) {
      wait_until_ready(queued, lock, [&] { return !queue.empty() || closing; });
      if (queue.empty()) return;  // closing, everything written
      Buffer buffer = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      taken.notify_one();
      bool ok = write_all(file, buffer.text);
      if (ok && buffer.sync) ok = gzflush(static_cast<gzFile>(file), Z_SYNC_FLUSH) == Z_OK;
      lock.lock();
      failed |= !ok;
    }
  }
  // Queues one buffer (waits while kMaxQueued are queued); false once a write has failed.
  bool push(std::string&& text, bool sync) {
    std::unique_lock lock(mutex);
    wait_until_ready(taken, lock, [&] { return queue.size() < kMaxQueued || failed; });
    if (failed) return false;
    queue.push_back({std::move(text), sync});
    queued.notify_one();
    return true;
  }
  // Waits until every queued buffer is written; false if any write failed.
  bool finish() {
    {
      std::lock_guard lock(mutex);
      closing = true;
    }
    queued.notify_one();
    thread.join();
    return !failed;
  }
};

namespace {
// "run/trace.jsonl.gz" -> "run/trace.1234.jsonl.gz": the pid before the first dot of the file's name.
std::string with_pid(const std::string& path) {
  const std::size_t name = path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1;
  const std::size_t dot = path.find('.', name + 1);
  const std::string pid = "." + std::to_string(getpid());
  return dot == std::string::npos ? path + pid : path.substr(0, dot) + pid + path.substr(dot);
}

// Opens `path` for writing and locks it for this process; -1 with errno when it cannot be opened, -2
// when another process holds it. Non-blocking: a FIFO without a reader fails instead of hanging. A POSIX
// record lock, not flock(): a forked child (a DataLoader worker) does not inherit it, so it never keeps
// the file from its parent's next trace. Where the file system has no locks (some network and FUSE
// mounts), the file is written unlocked, as before.
// `st`: the file's identity once opened.
int open_locked(const std::string& path, struct stat& st) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0666);
  if (fd < 0) return -1;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  st = {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return fd;  // a device (/dev/null) or pipe: as it is
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file
  if (fcntl(fd, F_SETLK, &whole) != 0 && (errno == EACCES || errno == EAGAIN)) {
    ::close(fd);
    return -2;
  }
  (void)!ftruncate(fd, 0);  // only once it is ours
  return fd;
}
}  // namespace

TraceWriter::TraceWriter(const std::string& path, const std::string& source, const std::string& device)
    : path_(path), source_(source), device_(device), owner_pid_(int(getpid())) {
  // Every process of a job inherits GPUMEM_TRACE (torchrun's ranks): two writing one file interleave
  // into a trace nobody can read, so a file another process writes is left to it and this one writes
  // beside it, with its pid in the name.
  struct stat st {};
  int fd = open_locked(path_, st);
  if (fd == -2) {
    path_ = with_pid(path);
    redirected_ = true;
    fd = open_locked(path_, st);
  }
  if (fd < 0) throw TraceError(path_, 0, std::string("cannot create the trace file: ") + (fd == -2 ? "another process writes it" : std::strerror(errno)));
  file_id_ = {std::uint64_t(st.st_dev), std::uint64_t(st.st_ino)};
  // "wbT" writes plain text through the same calls; gzip level 6 otherwise.
  file_ = gzdopen(fd, ends_with(path_, ".gz") ? "wb6" : "wbT");
  if (!file_) {
    ::close(fd);
    throw TraceError(path_, 0, "cannot create the trace file: out of memory");
  }
  pending_.reserve(kBufferBytes + 256);
}

bool TraceWriter::writes(const std::string& path) const {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && file_id_ == std::pair{std::uint64_t(st.st_dev), std::uint64_t(st.st_ino)};
}

void TraceWriter::put_header() {
  nlohmann::json header = {{"format", "gpumem-trace"}, {"version", 2}, {"source", source_}, {"device", device_}};
  header_written_ = true;
  const std::string line = header.dump() + "\n";
  put(line.data(), line.size());
}

TraceWriter::~TraceWriter() {
  try {
    close();
  } catch (...) {
  }
}

void TraceWriter::write(const Event& e) {
  if (!header_written_) put_header();
  char line[200];
  int n = std::snprintf(line, sizeof line, "{\"t\": %llu, \"op\": \"%s\", \"addr\": %llu, \"size\": %llu, \"stream\": %llu}\n",
                        static_cast<unsigned long long>(e.t), op_name(e.op), static_cast<unsigned long long>(e.addr),
                        static_cast<unsigned long long>(e.size), static_cast<unsigned long long>(e.stream));
  put(line, std::size_t(n));
  ++events_;
}

bool TraceWriter::forked() const noexcept { return int(getpid()) != owner_pid_; }

void TraceWriter::put(const char* text, std::size_t size) {
  if (!file_) throw TraceError(path_, 0, "the trace file is already closed");
  pending_.append(text, size);
  unflushed_ = true;
  if (pending_.size() >= kBufferBytes) hand_off(false);
}

void TraceWriter::flush() {
  if (!file_ || !unflushed_) return;
  hand_off(true);
  unflushed_ = false;
}

void TraceWriter::let_go_of_parents() noexcept {
  file_ = nullptr;
  (void)compressor_.release();
}

const char* TraceWriter::shut(bool flush) {
  bool written = compressor_ ? compressor_->finish() : true;
  compressor_.reset();
  written = written && (!flush || write_all(file_, pending_));
  pending_.clear();
  const int rc = gzclose(static_cast<gzFile>(file_));
  file_ = nullptr;
  if (!written) return "cannot write the trace file (disk full?)";
  return rc == Z_OK ? nullptr : "cannot finish the trace file";
}

void TraceWriter::hand_off(bool sync) {
  if (forked()) {
    let_go_of_parents();
    throw TraceError(path_, 0, "a forked child does not write its parent's trace");
  }
  if (!compressor_) compressor_ = std::make_unique<Compressor>(file_);
  std::string full;
  full.reserve(kBufferBytes + 256);
  full.swap(pending_);
  if (compressor_->push(std::move(full), sync)) return;
  shut(false);  // a write failed: the file is given up, and one error said
  throw TraceError(path_, 0, "cannot write the trace file (disk full?)");
}

void TraceWriter::close() {
  if (!file_) return;
  if (forked()) {  // the parent finishes its file; the child leaves it alone
    let_go_of_parents();
    return;
  }
  if (!header_written_) put_header();  // a trace without events still starts with its header
  // The end record: a reader tells a finished trace from one whose process died at a line boundary.
  const std::string end = "{\"end\": true, \"events\": " + std::to_string(events_) + "}\n";
  put(end.data(), end.size());  // throws if the buffer it filled could not be written (the file given up)
  if (const char* failed = shut(true)) throw TraceError(path_, 0, failed);
}

}  // namespace gpumem::trace
