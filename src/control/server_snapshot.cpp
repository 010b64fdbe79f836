// Snapshot streaming: the snapshot is plain data taken under the allocators' locks; the renderers then write
// it through a stream buffer that sends each full buffer as one data frame, so a large document is only ever
// one chunk in memory beside the plain data it is rendered from.
#include "control/server_snapshot.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <ostream>
#include <streambuf>
#include <vector>

#include "control/channel.hpp"

namespace gpumem::control {
namespace {

// A client that takes no chunk for this long is gone or stuck; the whole transfer is capped too, so the
// server thread (which also answers cooperative-release requests) is never held for good.
constexpr auto kStallTimeout = std::chrono::seconds(2);
constexpr auto kTransferLimit = std::chrono::minutes(5);

struct SourceSlot {
  std::mutex mutex;
  SnapshotSource source;  // guarded by mutex
};
SourceSlot& source_slot() {
  static SourceSlot* slot = new SourceSlot;  // leaked: the server thread may read it while the process exits
  return *slot;
}

// The data frames of one document. Failing to send marks it broken: the ostream then reports badbit and
// the renderer stops at its next write.
class FrameStreamBuf final : public std::streambuf {
 public:
  FrameStreamBuf(int fd, Clock::time_point end) : fd_(fd), end_(end), buffer_(kSnapshotChunkBytes) {
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }
  std::uint64_t bytes() const { return bytes_; }
  bool broken() const { return broken_; }

 protected:
  int_type overflow(int_type c) override {
    if (!send_pending()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return send_pending() ? 0 : -1; }

 private:
  bool send_pending() {
    if (broken_) return false;
    std::size_t n = std::size_t(pptr() - pbase());
    if (n == 0) return true;  // an empty frame would end the document
    std::string error;
    if (!send_frame(fd_, std::string_view(pbase(), n), std::min(Clock::now() + kStallTimeout, end_), error)) {
      broken_ = true;
      return false;
    }
    bytes_ += n;
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return true;
  }

  int fd_;
  Clock::time_point end_;
  std::vector<char> buffer_;
  std::uint64_t bytes_ = 0;
  bool broken_ = false;
};

report::TorchSnapshotInput take_snapshot(const ServerHooks& hooks) {
  SnapshotSource source;
  {
    std::lock_guard lock(source_slot().mutex);
    source = source_slot().source;
  }
  if (source) return source();
  report::TorchSnapshotInput in;
  for (const ServedDevice& d : hooks.devices()) {
    in.devices.push_back(d.allocator->snapshot());
    in.devices.back().device = d.index;
  }
  if (const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF")) in.alloc_conf = conf;
  return in;
}

// Keeps only `device`'s snapshot and trace (trace lists stay indexed by device, as PyTorch's are).
bool keep_only_device(report::TorchSnapshotInput& in, int device) {
  std::erase_if(in.devices, [&](const AllocatorSnapshot& s) { return s.device != device; });
  for (std::size_t d = 0; d < in.traces.size(); ++d)
    if (int(d) != device) in.traces[d].clear();
  return !in.devices.empty();
}

struct Prepared {
  nlohmann::json head;
  report::TorchSnapshotInput input;
};

Prepared prepare(const Request& r, const ServerHooks& hooks) {
  Prepared p{ok_answer(), take_snapshot(hooks)};
  if (r.snapshot_device && !keep_only_device(p.input, *r.snapshot_device)) {
    p.head = error_answer("it has no allocator on device " + std::to_string(*r.snapshot_device));
    return p;
  }
  report::SnapshotCounts counts = report::count_snapshot(p.input.devices);
  p.head["format"] = snapshot_format_name(r.format);
  p.head["devices"] = p.input.devices.size();
  p.head["segments"] = counts.segments;
  p.head["blocks"] = counts.blocks;
  p.head["active_blocks"] = counts.active_blocks;
  return p;
}

}  // namespace

void set_snapshot_source(SnapshotSource source) {
  std::lock_guard lock(source_slot().mutex);
  source_slot().source = std::move(source);
}

nlohmann::json snapshot_head(const Request& request, const ServerHooks& hooks) {
  return prepare(request, hooks).head;
}

void serve_snapshot(int fd, const Request& r, const ServerHooks& hooks) noexcept {
  Clock::time_point end = Clock::now() + kTransferLimit;
  auto step = [&] { return std::min(Clock::now() + kStallTimeout, end); };
  std::string error;
  try {
    Prepared p;
    try {
      p = prepare(r, hooks);
    } catch (const std::exception& e) {
      send_frame(fd, to_wire(error_answer(std::string("cannot take the snapshot: ") + e.what())), step(), error);
      return;
    }
    if (!send_frame(fd, to_wire(p.head), step(), error) || !p.head.value("ok", false)) return;
    FrameStreamBuf buffer(fd, end);
    std::string failure;
    try {
      std::ostream out(&buffer);
      out.exceptions(std::ios::badbit);  // a gone client stops the renderer at its next write
      if (r.format == SnapshotFormat::pickle) report::write_torch_snapshot(p.input, out);
      else report::write_snapshot_json(p.input.devices, out);
      out.flush();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (buffer.broken() || !send_frame(fd, {}, step(), error)) return;  // nobody left to tell
    nlohmann::json trailer = failure.empty() ? ok_answer() : error_answer("the snapshot is incomplete: " + failure);
    trailer["bytes"] = buffer.bytes();
    send_frame(fd, to_wire(trailer), step(), error);
  } catch (...) {
    // out of memory while taking or rendering: the connection closes, the program goes on
  }
}

}  // namespace gpumem::control
