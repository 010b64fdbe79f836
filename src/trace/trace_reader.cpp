// Reading: a ByteSource gives the bytes, lines are cut out of 1 MiB chunks and handed to the header check
// (line 1, nlohmann::json: rare, flexible) or the hand-written event parser (hot), then to the validator.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "gpumem/printable.hpp"
#include "gpumem/trace.hpp"
#include "trace/byte_source.hpp"
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

// Cuts a ByteSource into lines; its buffer holds one chunk plus at most one unfinished line.
class LineReader {
 public:
  LineReader(std::unique_ptr<ByteSource> source, const std::string& path) : source_(std::move(source)), path_(path) {}

  // The next line without its '\n'; false at the end. `complete` is false for a last line without '\n'.
  bool next(std::string_view& line, bool& complete) {
    for (;;) {
      if (const void* nl = std::memchr(buffer_.data() + scanned_, '\n', filled_ - scanned_)) {
        const std::size_t end = static_cast<const char*>(nl) - buffer_.data();
        line = std::string_view(buffer_.data() + start_, end - start_);
        start_ = scanned_ = end + 1;
        complete = true;
        return count();
      }
      scanned_ = filled_;
      if (at_end_) {
        if (start_ == filled_) return false;
        line = std::string_view(buffer_.data() + start_, filled_ - start_);
        start_ = scanned_ = filled_;
        complete = false;
        return count();
      }
      refill();
    }
  }

  std::size_t line() const { return line_; }  // the number of the line last returned
  // The gzip data stopped mid-stream: the lines before the cut were handed out, the last one maybe cut.
  bool cut() const { return cut_; }

 private:
  bool count() {
    if (++line_ > UINT32_MAX) throw TraceError(path_, line_, "the trace has more than 2^32 lines");
    return true;
  }

  void refill() {
    std::memmove(buffer_.data(), buffer_.data() + start_, filled_ - start_);
    filled_ -= start_;
    scanned_ -= start_;
    start_ = 0;
    if (filled_ > kMaxLineBytes) throw TraceError(path_, line_ + 1, "the line is longer than 1 MiB (not a gpumem-trace file?)");
    // Reads start small and double up to kChunkBytes: a short trace (or a fuzzer's input) never pays
    // for a 1 MiB buffer, a long one reads in large chunks after a few refills.
    chunk_ = std::min(kChunkBytes, chunk_ * 2);
    if (buffer_.size() < filled_ + chunk_) buffer_.resize(filled_ + chunk_);
    std::size_t got;
    try {
      got = source_->read(buffer_.data() + filled_, chunk_);
    } catch (const TruncatedError&) {
      got = 0;
      cut_ = true;
    } catch (const ByteSourceError& e) {
      throw TraceError(path_, line_ + 1, e.what());  // lines complete so far were good; the damage is in the next
    }
    filled_ += got;
    at_end_ = got == 0;
  }

  std::unique_ptr<ByteSource> source_;
  const std::string& path_;
  std::string buffer_;
  std::size_t start_ = 0, scanned_ = 0, filled_ = 0;  // the unread part is [start_, filled_)
  std::size_t line_ = 0;
  std::size_t chunk_ = std::size_t(32) << 10;  // the next read's size is twice this, at most kChunkBytes
  bool at_end_ = false;
  bool cut_ = false;
};

// A last line without its '\n' that starts like an event and is not whole JSON: the rest of it was never
// written. A whole object that is no valid event is corrupt, not cut.
bool cut_short(std::string_view line) {
  const std::size_t first = line.find_first_not_of(" \t\r");
  return first != std::string_view::npos && line[first] == '{' && !nlohmann::json::accept(line);
}

// Where a reader's bytes come from: a file (opened once, read from its start at every pass) or text.
class Input {
 public:
  explicit Input(const std::string& path) : file_(std::in_place, path) {}
  explicit Input(std::string_view text) : text_(text) {}
  std::unique_ptr<ByteSource> open() const { return file_ ? file_->open() : ByteSource::from_text(text_); }

 private:
  std::optional<TraceFile> file_;
  std::string_view text_;
};

// Whether any event line is a free_completed: it decides, from the first event on, when blocks become
// reusable. A pass of its own that parses only the lines that mention the op; it stops at the first one,
// which in a PyTorch trace comes early. Damage ends the search: the reading proper will report it.
bool has_free_completed(const Input& input, const std::string& path) {
  static constexpr std::string_view kNeedle = "\"free_completed\"";
  try {
    LineReader lines(input.open(), path);
    std::string_view line;
    bool complete;
    std::string problem;
    Event event;
    while (lines.next(line, complete)) {
      if (lines.line() == 1 || line.find(kNeedle) == std::string_view::npos) continue;
      if (parse_event_line(line, event, problem) && event.op == Op::free_completed) return true;
    }
  } catch (const TraceError&) {
  }
  return false;
}

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

struct TraceReader::Impl {
  // A file, or the text when given.
  Impl(const std::string& path, std::optional<std::string_view> text) : input(text ? Input(*text) : Input(path)) {
    info.path = path;
    info.summary.has_free_completed = has_free_completed(input, info.path);
    start();
  }

  // From the first line: the header, then the events with a fresh validator.
  void start() {
    info.summary = TraceSummary{.has_free_completed = info.summary.has_free_completed};
    info.truncated = false;
    info.truncation.clear();
    ended = false;
    done = false;
    validator.reset();
    lines.emplace(input.open(), info.path);
    validator.emplace(info.path, info.summary);
    std::string_view line;
    bool complete;
    if (!lines->next(line, complete)) {
      if (lines->cut()) throw TraceError(info.path, 1, "the trace ends before its header: the recording process did not finish it");
      throw TraceError(info.path, 1, "the file is empty; expected a gpumem-trace header");
    }
    info.source.clear();
    info.device.clear();
    header(line);
  }

  void header(std::string_view text) {
    auto json = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) {  // text that is not UTF-8 (a source named in another encoding) is only shown
      const std::string utf8 = valid_utf8(text);
      json = nlohmann::json::parse(utf8, nullptr, /*allow_exceptions=*/false);
    }
    const bool object = !json.is_discarded() && json.is_object();
    if (!object || !json.contains("format") || json["format"] != "gpumem-trace")
      fail("not a gpumem-trace file (line 1 must be a header like {\"format\": \"gpumem-trace\", \"version\": 1})");
    const auto& version = json.contains("version") ? json["version"] : nlohmann::json();
    if (!version.is_number_integer()) fail("the gpumem-trace header has no integer \"version\"");
    if (version.get<std::int64_t>() != 1 && version.get<std::int64_t>() != 2)
      fail("unsupported gpumem-trace version " + version.dump() + " (this gpumem reads versions 1 and 2)");
    info.version = int(version.get<std::int64_t>());
    if (json.contains("source") && json["source"].is_string()) info.source = json["source"].get<std::string>();
    if (json.contains("device") && json["device"].is_string()) info.device = json["device"].get<std::string>();
  }

  [[noreturn]] void fail(const std::string& problem) const { throw TraceError(info.path, lines->line(), problem); }

  bool next(Event& event) {
    if (done) return false;
    std::string_view line;
    bool complete;
    std::size_t cut_line = 0;  // the line cut short, when the trace ends inside one
    while (lines->next(line, complete)) {
      if (blank(line)) continue;
      if (ended) fail("text after the end record");
      if (!parse_event_line(line, event, problem)) {
        if (info.version >= 2 && end_record(line)) continue;
        if (!complete && (lines->cut() || cut_short(line))) {
          end_early(lines->cut() ? kCutStream : "its last line is cut short");
          cut_line = lines->line();
          break;
        }
        if (!complete) problem = "the last line is incomplete (truncated file?): " + problem;
        else problem = misplaced_line(line).value_or(problem);
        fail(problem);
      }
      event.line = static_cast<std::uint32_t>(lines->line());
      validator->add(event);
      return true;
    }
    if (lines->cut()) end_early(kCutStream);
    if (info.version >= 2 && !ended) end_early("it has no end record");
    if (info.summary.events == 0) {
      if (info.truncated)
        throw TraceError(info.path, cut_line ? cut_line : lines->line() + 1,
                         "the trace ends before its first event: the recording process did not finish it");
      throw TraceError(info.path, lines->line() + 1, "the trace has no events after its header");
    }
    done = true;
    return false;
  }

  static constexpr const char* kCutStream = "its compressed data stops mid-stream";
  void end_early(const char* why) {
    if (info.truncated) return;  // the first reason found
    info.truncated = true;
    info.truncation = why;
  }

  // A header or an end record where an event belongs says so, not which event field it lacks.
  std::optional<std::string> misplaced_line(std::string_view text) const {
    if (text.find("\"format\"") == std::string_view::npos && text.find("\"end\"") == std::string_view::npos)
      return std::nullopt;
    const auto json = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object() || json.contains("op")) return std::nullopt;
    if (json.contains("format"))
      return std::string("a second header: two traces joined into one (cat a.gz b.gz)? Replay each on its own");
    if (json.contains("end"))
      return info.version < 2 ? std::string("an end record in a version 1 trace (only version 2 traces end with one)")
                              : std::string("an end record needs \"end\": true and the count of events");
    return std::nullopt;
  }

  // {"end": true, "events": N}: the last line of a version 2 trace; N must be the events read.
  bool end_record(std::string_view text) {
    if (text.find("\"end\"") == std::string_view::npos) return false;
    const auto json = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object() || !json.contains("end") || json["end"] != true) return false;
    if (!json.contains("events") || !json["events"].is_number_unsigned())
      fail("the end record has no count of events (\"events\": " + std::to_string(info.summary.events) + " here)");
    const auto& events = json["events"];
    if (events.get<std::uint64_t>() != info.summary.events)
      fail("the end record counts " + events.dump() + " events, but the trace has " + std::to_string(info.summary.events));
    ended = true;
    return true;
  }

  Input input;
  TraceInfo info;
  std::optional<LineReader> lines;
  std::optional<TraceValidator> validator;
  std::string problem;
  bool ended = false;  // the end record was read
  bool done = false;
};

TraceReader::TraceReader(const std::string& path) : impl_(std::make_unique<Impl>(path, std::nullopt)) {}
TraceReader::TraceReader(std::string_view text, const std::string& name) : impl_(std::make_unique<Impl>(name, text)) {}
void TraceReader::rewind() { impl_->start(); }
TraceReader::~TraceReader() = default;
bool TraceReader::next(Event& event) { return impl_->next(event); }
const TraceInfo& TraceReader::info() const { return impl_->info; }

namespace {
Trace collect(TraceReader& reader) {
  Trace trace;
  Event event;
  while (reader.next(event)) trace.events.push_back(event);
  static_cast<TraceInfo&>(trace) = reader.info();
  return trace;
}
}  // namespace

Trace parse_trace(std::string_view text, const std::string& name) {
  TraceReader reader(text, name);
  return collect(reader);
}

Trace read_trace(const std::string& path) {
  TraceReader reader(path);
  return collect(reader);
}

}  // namespace gpumem::trace
