// Reading: zlib's gzread streams both gzip and plain files; lines are cut out of 1 MiB chunks and handed
// to the header check (line 1, nlohmann::json: rare, flexible) or the hand-written event parser (hot).
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "gpumem/trace.hpp"
#include "trace/event_parser.hpp"
#include "trace/trace_validate.hpp"

namespace gpumem::trace {
namespace {

constexpr std::size_t kMaxLineBytes = std::size_t(1) << 20;
constexpr std::size_t kChunkBytes = std::size_t(1) << 20;

bool blank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r') return false;
  }
  return true;
}

// Consumes the lines of one trace in order.
class TraceBuilder {
 public:
  explicit TraceBuilder(Trace& trace) : trace_(trace) {}

  std::size_t lines() const { return line_; }

  void add_line(std::string_view text, bool complete) {
    ++line_;
    if (line_ > UINT32_MAX) fail("the trace has more than 2^32 lines");
    if (line_ == 1) return header(text);
    if (blank(text)) return;
    Event event;
    if (!parse_event_line(text, event, problem_)) {
      if (!complete) problem_ = "the last line is incomplete (truncated file?): " + problem_;
      fail(problem_);
    }
    event.line = static_cast<std::uint32_t>(line_);
    trace_.events.push_back(event);
  }

  void finish() {
    if (line_ == 0) throw TraceError(trace_.path, 1, "the file is empty; expected a gpumem-trace header");
    if (trace_.events.empty()) throw TraceError(trace_.path, line_ + 1, "the trace has no events after its header");
    validate_trace(trace_);
  }

  [[noreturn]] void fail(const std::string& problem) const { throw TraceError(trace_.path, line_, problem); }

 private:
  void header(std::string_view text) {
    const auto json = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    const bool object = !json.is_discarded() && json.is_object();
    if (!object || !json.contains("format") || json["format"] != "gpumem-trace")
      fail("not a gpumem-trace file (line 1 must be a header like {\"format\": \"gpumem-trace\", \"version\": 1})");
    const auto& version = json.contains("version") ? json["version"] : nlohmann::json();
    if (!version.is_number_integer())
      fail("the gpumem-trace header has no integer \"version\"");
    if (version.get<std::int64_t>() != 1)
      fail("unsupported gpumem-trace version " + version.dump() + " (this gpumem reads version 1)");
    if (json.contains("source") && json["source"].is_string()) trace_.source = json["source"].get<std::string>();
    if (json.contains("device") && json["device"].is_string()) trace_.device = json["device"].get<std::string>();
  }

  Trace& trace_;
  std::size_t line_ = 0;
  std::string problem_;
};

// Hands every complete line of `buffer` to the builder; returns how many bytes were consumed.
std::size_t feed_lines(std::string_view buffer, TraceBuilder& builder) {
  std::size_t start = 0;
  for (;;) {
    const void* nl = std::memchr(buffer.data() + start, '\n', buffer.size() - start);
    if (nl == nullptr) break;
    const std::size_t end = static_cast<const char*>(nl) - buffer.data();
    builder.add_line(buffer.substr(start, end - start), true);
    start = end + 1;
  }
  return start;
}

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

}  // namespace

TraceError::TraceError(const std::string& file, std::size_t line, const std::string& problem)
    : Error(line == 0 ? file + ": " + problem : file + ": line " + std::to_string(line) + ": " + problem),
      file_(file),
      line_(line),
      problem_(problem) {}

const char* op_name(Op op) noexcept {
  switch (op) {
    case Op::alloc: return "alloc";
    case Op::free: return "free";
    case Op::free_completed: return "free_completed";
    case Op::segment_alloc: return "segment_alloc";
    case Op::segment_free: return "segment_free";
    case Op::segment_map: return "segment_map";
    case Op::segment_unmap: return "segment_unmap";
  }
  return "?";
}

Trace parse_trace(std::string_view text, const std::string& name) {
  Trace trace;
  trace.path = name;
  TraceBuilder builder(trace);
  const std::size_t used = feed_lines(text, builder);
  if (used < text.size()) builder.add_line(text.substr(used), false);
  builder.finish();
  return trace;
}

Trace read_trace(const std::string& path) {
  Trace trace;
  trace.path = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw TraceError(path, 0, "is a directory, not a trace file");
  errno = 0;
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (!file) {
    throw TraceError(path, 0, std::string("cannot open the trace: ") + (errno ? std::strerror(errno) : "out of memory"));
  }
  gzbuffer(file.get(), 256 * 1024);
  TraceBuilder builder(trace);
  std::string buffer;
  std::size_t filled = 0;
  for (;;) {
    if (buffer.size() < filled + kChunkBytes) buffer.resize(filled + kChunkBytes);
    const int got = gzread(file.get(), buffer.data() + filled, static_cast<unsigned>(kChunkBytes));
    int zerr = Z_OK;
    const char* zmsg = gzerror(file.get(), &zerr);
    if (got < 0 || (zerr != Z_OK && zerr != Z_BUF_ERROR) || (got == 0 && zerr == Z_BUF_ERROR)) {
      // Lines completed so far are good; the damage lies in the next one.
      feed_lines(std::string_view(buffer.data(), filled + std::max(got, 0)), builder);
      if (zerr == Z_ERRNO) throw TraceError(path, builder.lines() + 1, std::string("cannot read the trace: ") + std::strerror(errno));
      std::string why = zmsg ? zmsg : "unknown zlib error";
      if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);  // zlib prefixes the path
      throw TraceError(path, builder.lines() + 1, "the compressed data is corrupt or truncated (" + why + ")");
    }
    if (got == 0) break;
    filled += static_cast<std::size_t>(got);
    const std::size_t used = feed_lines(std::string_view(buffer.data(), filled), builder);
    std::memmove(buffer.data(), buffer.data() + used, filled - used);
    filled -= used;
    if (filled > kMaxLineBytes) {
      throw TraceError(path, builder.lines() + 1, "the line is longer than 1 MiB (not a gpumem-trace file?)");
    }
  }
  if (filled > 0) builder.add_line(std::string_view(buffer.data(), filled), false);
  builder.finish();
  return trace;
}

}  // namespace gpumem::trace
