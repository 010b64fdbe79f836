// The trace reader: plain and gzip files, the summary it derives, and every kind of bad input, each
// with the line number it must name.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "gpumem/trace.hpp"

namespace gpumem::trace {
namespace {

const std::string kHeader = R"({"format": "gpumem-trace", "version": 1, "source": "unit test", "device": "sim"})";

std::string ev(const char* op, std::uint64_t addr, std::uint64_t size, std::uint64_t stream = 0, std::uint64_t t = 1) {
  return "{\"t\": " + std::to_string(t) + ", \"op\": \"" + op + "\", \"addr\": " + std::to_string(addr) +
         ", \"size\": " + std::to_string(size) + ", \"stream\": " + std::to_string(stream) + "}";
}

std::string lines(std::initializer_list<std::string> l) {
  std::string out;
  for (const auto& s : l) out += s + "\n";
  return out;
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() / ("gpumem_trace_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write_plain(const std::string& name, const std::string& text) const {
    const auto p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  std::string write_gzip(const std::string& name, const std::string& text) const {
    const auto p = (path_ / name).string();
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, text.data(), unsigned(text.size()));
    gzclose(f);
    return p;
  }

 private:
  std::filesystem::path path_;
};

// Expects parse_trace to fail naming `line` and mentioning `needle`.
void expect_error(const std::string& text, std::size_t line, const std::string& needle) {
  try {
    parse_trace(text, "t.jsonl");
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const TraceError& e) {
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("t.jsonl: line " + std::to_string(line) + ": ", 0), 0u) << e.what();
  }
}

const std::string kSimple = lines({kHeader, ev("alloc", 4096, 100), ev("alloc", 8192, 300, 7), ev("free", 4096, 100),
                                   ev("alloc", 4096, 50), ev("free", 8192, 300, 7)});

TEST(TraceReader, ParsesEventsAndHeader) {
  const Trace t = parse_trace(kSimple, "mem");
  EXPECT_EQ(t.source, "unit test");
  EXPECT_EQ(t.device, "sim");
  ASSERT_EQ(t.events.size(), 5u);
  EXPECT_EQ(t.events[1].op, Op::alloc);
  EXPECT_EQ(t.events[1].addr, 8192u);
  EXPECT_EQ(t.events[1].size, 300u);
  EXPECT_EQ(t.events[1].stream, 7u);
  EXPECT_EQ(t.events[1].line, 3u);
  // a block's free carries its alloc's slot; the slot of a released block is taken by the next alloc
  EXPECT_EQ(t.events[0].block, 0u);
  EXPECT_EQ(t.events[1].block, 1u);
  EXPECT_EQ(t.events[2].block, 0u);
  EXPECT_EQ(t.events[3].block, 0u);
  EXPECT_EQ(t.events[4].block, 1u);
  EXPECT_EQ(t.summary.peak_live_blocks, 2u);
  EXPECT_EQ(t.summary.events, 5u);
  EXPECT_EQ(t.summary.allocs, 3u);
  EXPECT_EQ(t.summary.frees, 2u);
  EXPECT_FALSE(t.summary.has_free_completed);
  EXPECT_EQ(t.summary.peak_requested, 400u);
  EXPECT_EQ(t.summary.peak_requested_event, 1u);
  EXPECT_EQ(t.summary.live_at_end, 50u);
}

TEST(TraceReader, FieldsInAnyOrderWhitespaceAndUnknownFields) {
  const std::string text = kHeader + "\n" +
                           R"(  { "stream":3,"size" : 10 ,"addr":1,"op":"alloc","t":5, "extra": "x\"y", "n": -1.5e3, "b": true }  )" +
                           "\r\n\n   \n";
  const Trace t = parse_trace(text, "mem");
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].stream, 3u);
  EXPECT_EQ(t.events[0].size, 10u);
  EXPECT_EQ(t.events[0].t, 5u);
}

TEST(TraceReader, FreeCompletedDecidesReuse) {
  // free at line 4 does not lower the live bytes; free_completed at line 6 does.
  const std::string text = lines({kHeader, ev("alloc", 1, 100), ev("alloc", 2, 100), ev("free", 1, 100), ev("alloc", 3, 100),
                                  ev("free_completed", 1, 100), ev("alloc", 4, 100)});
  const Trace t = parse_trace(text, "mem");
  EXPECT_TRUE(t.summary.has_free_completed);
  EXPECT_EQ(t.summary.peak_requested, 300u);
  EXPECT_EQ(t.events[4].block, 0u);
  EXPECT_EQ(t.summary.live_at_end, 300u);
}

TEST(TraceReader, RecordedSegmentFigures) {
  const std::string text = lines({kHeader, ev("segment_alloc", 0, 2 << 20), ev("alloc", 0, 100), ev("segment_map", 0, 4 << 20),
                                  ev("segment_unmap", 0, 2 << 20), ev("segment_free", 0, 2 << 20), ev("segment_alloc", 0, 1 << 20)});
  const Trace t = parse_trace(text, "mem");
  EXPECT_EQ(t.summary.segment_events, 5u);
  EXPECT_EQ(t.summary.recorded_segment_allocs, 3u);
  EXPECT_EQ(t.summary.recorded_peak_reserved, std::uint64_t(6) << 20);
  // Recording began after a 1 GiB segment was made: giving it back shows it was reserved from the start.
  const std::string late = lines({kHeader, ev("segment_free", 999, 1 << 30), ev("segment_alloc", 4096, 1 << 30),
                                  ev("alloc", 4096, 1 << 29), ev("segment_alloc", 8192, 2 << 20)});
  EXPECT_EQ(parse_trace(late, "late").summary.recorded_peak_reserved, (std::uint64_t(1) << 30) + (2 << 20));
}

TEST(TraceReader, PlainAndGzipFilesGiveTheSameTrace) {
  TempDir dir;
  const Trace plain = read_trace(dir.write_plain("a.jsonl", kSimple));
  const Trace gz = read_trace(dir.write_gzip("a.jsonl.gz", kSimple));
  ASSERT_EQ(plain.events.size(), gz.events.size());
  for (std::size_t i = 0; i < plain.events.size(); ++i) {
    EXPECT_EQ(plain.events[i].addr, gz.events[i].addr);
    EXPECT_EQ(plain.events[i].line, gz.events[i].line);
  }
  EXPECT_EQ(gz.summary.peak_requested, 400u);
}

TEST(TraceReader, LargeGzipFileAcrossChunks) {
  // More than one 1 MiB read chunk, so lines straddle chunk boundaries.
  std::string text = kHeader + "\n";
  const int n = 40000;
  for (int i = 0; i < n; ++i) text += ev("alloc", 4096 + 512 * std::uint64_t(i), 512 + i % 7) + "\n";
  TempDir dir;
  const Trace t = read_trace(dir.write_gzip("big.jsonl.gz", text));
  ASSERT_EQ(t.events.size(), std::size_t(n));
  EXPECT_EQ(t.events.back().line, std::uint32_t(n + 1));
  EXPECT_EQ(t.events.back().size, 512u + (n - 1) % 7);
}

TEST(TraceReader, MissingFileIsAClearError) {
  try {
    read_trace("/nonexistent/dir/trace.jsonl.gz");
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_EQ(e.line(), 0u);
    EXPECT_NE(std::string(e.what()).find("cannot open the trace"), std::string::npos) << e.what();
  }
}

// What a process killed while recording leaves: a gzip stream cut short. Its complete events are read, and
// the trace says it ends early.
TEST(TraceReader, ATruncatedGzipGivesItsCompleteEvents) {
  std::string text = kHeader + "\n";
  for (int i = 0; i < 5000; ++i) text += ev("alloc", 4096 + 512 * std::uint64_t(i), 512 + std::uint64_t(i)) + "\n";
  TempDir dir;
  const std::string path = dir.write_gzip("t.jsonl.gz", text);
  const auto full = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, full / 2);
  Trace t;
  ASSERT_NO_THROW(t = read_trace(path));
  EXPECT_TRUE(t.truncated);
  EXPECT_NE(t.truncation.find("mid-stream"), std::string::npos) << t.truncation;
  ASSERT_GT(t.events.size(), 1u);
  ASSERT_LT(t.events.size(), 5000u);
  for (std::size_t i = 0; i < t.events.size(); ++i) ASSERT_EQ(t.events[i].size, 512 + i) << i;  // none cut short
  // only the 8-byte trailer missing: every line is intact, but the file is still incomplete
  const std::string path2 = dir.write_gzip("v.jsonl.gz", text);
  std::filesystem::resize_file(path2, std::filesystem::file_size(path2) - 4);
  ASSERT_NO_THROW(t = read_trace(path2));
  EXPECT_TRUE(t.truncated);
  EXPECT_EQ(t.events.size(), 5000u);
  // cut before its first event: nothing to replay, one sentence
  std::filesystem::resize_file(path2, 30);
  try {
    read_trace(path2);
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("did not finish it"), std::string::npos) << e.what();
  }
  // cut inside its first event line: the error names that line (2), not the one after it
  const std::string first = ev("alloc", 4096, 1000);
  try {
    read_trace(dir.write_plain("w.jsonl", kHeader + "\n" + first.substr(0, first.size() / 2)));
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_EQ(e.line(), 2u) << e.what();
  }
}

// Version 2 (what the recorder writes) ends with an end record: a trace cut at a line boundary is told
// from a finished one. Version 1 has none, and is read as it always was.
TEST(TraceReader, AVersion2TraceWithoutItsEndRecordEndsEarly) {
  const std::string v2 = R"({"format": "gpumem-trace", "version": 2, "source": "unit test", "device": "sim"})";
  const std::string body = lines({ev("alloc", 4096, 100), ev("free", 4096, 100)});
  Trace t = parse_trace(v2 + "\n" + body + "{\"end\": true, \"events\": 2}\n", "t.jsonl");
  EXPECT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.version, 2);
  EXPECT_FALSE(t.truncated);
  t = parse_trace(v2 + "\n" + body, "t.jsonl");
  EXPECT_EQ(t.events.size(), 2u);
  EXPECT_TRUE(t.truncated);
  EXPECT_EQ(t.truncation, "it has no end record");
  t = parse_trace(kHeader + "\n" + body, "t.jsonl");
  EXPECT_FALSE(t.truncated);
  expect_error(v2 + "\n" + body + "{\"end\": true, \"events\": 3}\n", 4, "the end record counts 3 events, but the trace has 2");
  expect_error(v2 + "\n" + body + "{\"end\": true, \"events\": 2}\n" + ev("alloc", 4096, 1) + "\n", 5, "after the end record");
  expect_error(kHeader + "\n" + body + "{\"end\": true, \"events\": 2}\n", 4, "an end record in a version 1 trace");
  expect_error(v2 + "\n" + body + "{\"end\": true}\n", 4, "the end record has no count of events (\"events\": 2 here)");
  expect_error(v2 + "\n" + body + "{\"end\": false, \"events\": 2}\n", 4, "an end record needs \"end\": true");
  // Two traces joined (cat a.gz b.gz): the second header is named as such.
  expect_error(kHeader + "\n" + body + kHeader + "\n" + body, 4, "a second header: two traces joined");
}

TEST(TraceReader, CorruptGzipIsAnError) {
  std::string text = kHeader + "\n";
  for (int i = 0; i < 2000; ++i) text += ev("alloc", 4096 + 512 * std::uint64_t(i), 512) + "\n";
  TempDir dir;
  const std::string path = dir.write_gzip("c.jsonl.gz", text);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    const std::string junk(64, '\xA5');
    f.write(junk.data(), junk.size());
  }
  try {
    read_trace(path);
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_GE(e.line(), 1u);
    EXPECT_EQ(std::string(e.what()).rfind(path + ": line ", 0), 0u) << e.what();
  }
}

// gzip allows members one after another (`cat a.gz b.gz`); anything else after the data is damage, and
// every kind of it is named: text, random bytes, zero padding, a truncated second member.
TEST(TraceReader, BytesAfterTheGzipDataAreAnErrorNamingTheFile) {
  TempDir dir;
  const std::string first = lines({kHeader, ev("alloc", 1, 10)}), second = lines({ev("free", 1, 10)});
  const std::string a = dir.write_gzip("a.gz", first), b = dir.write_gzip("b.gz", second);
  std::ifstream in_a(a, std::ios::binary), in_b(b, std::ios::binary);
  const std::string gz_a((std::istreambuf_iterator<char>(in_a)), {}), gz_b((std::istreambuf_iterator<char>(in_b)), {});
  const Trace two = read_trace(dir.write_plain("two.gz", gz_a + gz_b));
  ASSERT_EQ(two.events.size(), 2u);
  EXPECT_EQ(two.events[1].line, 3u);

  const std::pair<std::string, std::string> tails[] = {
      {"garbage here\n", "13 bytes after the end of the gzip data"},
      {std::string("\xA5\x00\x17", 3), "3 bytes after the end of the gzip data"},
      {std::string(512, '\0'), "512 bytes after the end of the gzip data"},
  };
  // A second member cut short is a trace cut short: it ends early.
  const Trace cut = read_trace(dir.write_plain("cut.gz", gz_a + gz_b.substr(0, gz_b.size() / 2)));
  EXPECT_TRUE(cut.truncated);
  EXPECT_EQ(cut.events.size(), 1u);
  for (const auto& [tail, needle] : tails) {
    const std::string path = dir.write_plain("tail.gz", gz_a + tail);
    try {
      read_trace(path);
      ADD_FAILURE() << "accepted " << tail.size() << " bytes after the gzip data";
    } catch (const TraceError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": line 3: ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

// The reader keeps no event: slots are reused, so a long trace with few blocks live needs few of them.
TEST(TraceReader, StreamsWithSlotsBoundedByTheLiveBlocks) {
  std::string text = kHeader + "\n";
  for (std::uint64_t i = 0; i < 20000; ++i) {
    text += ev("alloc", 4096 * (i % 8 + 1), 64, 0, i) + "\n";
    if (i >= 3) text += ev("free", 4096 * ((i - 3) % 8 + 1), 64, 0, i) + "\n";
  }
  TraceReader reader(text, "mem");
  Event e;
  std::size_t n = 0;
  std::uint32_t top = 0;
  while (reader.next(e)) {
    ++n;
    top = std::max(top, e.block);
    EXPECT_EQ(reader.info().summary.events, n);
  }
  EXPECT_FALSE(reader.next(e)) << "the end stays the end";
  EXPECT_EQ(n, 39997u);
  EXPECT_EQ(top, 3u);
  EXPECT_EQ(reader.info().summary.peak_live_blocks, 4u);
  EXPECT_EQ(reader.info().summary.peak_requested, 4u * 64);
}

// A free_completed anywhere decides for the whole trace, even when it comes after the first frees.
TEST(TraceReader, LateFreeCompletedDecidesFromTheStart) {
  const std::string text = lines({kHeader, ev("alloc", 1, 100), ev("free", 1, 100), ev("alloc", 2, 100), ev("alloc", 3, 100),
                                  ev("free_completed", 1, 100)});
  const Trace t = parse_trace(text, "mem");
  EXPECT_TRUE(t.summary.has_free_completed);
  EXPECT_EQ(t.summary.peak_requested, 300u);
  // the op's name inside another field's string is not an event
  const Trace u = parse_trace(lines({kHeader, ev("alloc", 1, 100), R"({"t": 1, "op": "free", "addr": 1, "size": 100, "stream": 0, "note": "free_completed"})"}), "mem");
  EXPECT_FALSE(u.summary.has_free_completed);
}

// A pipe (`gpumem replay <(zcat t.gz)`) can be read only once; the reader copies it, so that the pass
// that looks for free_completed, the reading proper and a rewind (--min-capacity's probes) all see it.
TEST(TraceReader, PipeIsReadOnceAndRewindable) {
  TempDir dir;
  const std::string gz = dir.write_gzip("p.gz", kSimple);
  std::ifstream in(gz, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const std::string fifo = dir.write_plain("fifo", "");
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << bytes; });
  TraceReader reader(fifo);
  writer.join();
  Event e;
  for (int pass = 0; pass < 2; ++pass) {
    std::size_t n = 0;
    while (reader.next(e)) ++n;
    EXPECT_EQ(n, 5u) << "pass " << pass;
    EXPECT_EQ(reader.info().summary.peak_requested, 400u) << "pass " << pass;
    EXPECT_EQ(reader.info().source, "unit test");
    reader.rewind();
  }
}

TEST(TraceReader, APlainTraceCutMidLineGivesItsCompleteEvents) {
  const Trace whole = parse_trace(kSimple, "t.jsonl");
  const Trace t = parse_trace(kSimple + R"({"t": 1, "op": "alloc", "addr": 77, "si)", "t.jsonl");
  EXPECT_TRUE(t.truncated);
  EXPECT_EQ(t.truncation, "its last line is cut short");
  EXPECT_EQ(t.events.size(), whole.events.size());
  EXPECT_FALSE(whole.truncated);
  expect_error(kSimple + "garbage", 7, "incomplete");  // not the start of an event: damage
  // A whole object that is no valid event, only its '\n' missing: corrupt, not cut short.
  expect_error(kSimple + R"({"t": 1, "op": "alloc", "addr": 77, "size": -5, "stream": 0})", 7, "negative size");
}

TEST(TraceReader, HeaderErrors) {
  expect_error("", 1, "empty");
  expect_error("\x1f\x8b garbage\n", 1, "not a gpumem-trace file");
  expect_error("[1, 2]\n", 1, "not a gpumem-trace file");
  expect_error(R"({"format": "other", "version": 1})" "\n", 1, "not a gpumem-trace file");
  expect_error(R"({"format": "gpumem-trace"})" "\n", 1, "no integer \"version\"");
  expect_error(R"({"format": "gpumem-trace", "version": 3})" "\n", 1, "unsupported gpumem-trace version 3");
  expect_error(kHeader + "\n", 2, "no events");
  // A source named in another encoding (Latin-1 here) is not UTF-8: shown replaced, the trace read.
  const Trace latin1 = parse_trace(lines({"{\"format\": \"gpumem-trace\", \"version\": 1, \"source\": \"caf\xe9\"}",
                                          ev("alloc", 4096, 100)}), "t");
  EXPECT_EQ(latin1.events.size(), 1u);
  EXPECT_EQ(latin1.source, "caf\xef\xbf\xbd");
  // a plain file without any newline that is longer than the line limit
  TempDir dir;
  try {
    read_trace(dir.write_plain("long", std::string(3 << 20, 'x')));
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_EQ(e.line(), 1u);
    EXPECT_NE(std::string(e.what()).find("longer than 1 MiB"), std::string::npos) << e.what();
  }
}

TEST(TraceReader, MalformedEventLines) {
  auto with = [](const std::string& bad) { return lines({kHeader, ev("alloc", 1, 10), bad, ev("alloc", 2, 10)}); };
  expect_error(with(R"({"t": 1, "op": "mallocx", "addr": 5, "size": 1, "stream": 0})"), 3, "unknown op \"mallocx\"");
  expect_error(with(R"({"t": 1, "op": "alloc", "addr": 5, "stream": 0})"), 3, "missing field \"size\"");
  expect_error(with(R"({"t": 1, "addr": 5, "size": 1, "stream": 0})"), 3, "missing field \"op\"");
  expect_error(with(R"({"t": 1, "op": "alloc", "addr": 5, "size": -4096, "stream": 0})"), 3, "negative size");
  expect_error(with(R"({"t": 1, "op": "alloc", "addr": 5, "size": 1.5, "stream": 0})"), 3, "not a whole number");
  expect_error(with(R"({"t": 1, "op": "alloc", "addr": 5, "size": "big", "stream": 0})"), 3, "\"size\" is not a number");
  expect_error(with(R"({"t": 1, "op": "alloc", "addr": 99999999999999999999999, "size": 1, "stream": 0})"), 3, "64 bits");
  expect_error(with(R"({"t": 1, "op": "alloc", "addr": 5, "size": 1, "size": 2, "stream": 0})"), 3, "appears twice");
  expect_error(with(R"({"t": 1, "op": "alloc", "addr": 5, "size": 1, "stream": 0} x)"), 3, "unexpected text");
  expect_error(with(R"({"t": 1, "op": "alloc", "addr": 5, "size": 1 "stream": 0})"), 3, "expected '}' or ','");
  expect_error(with(R"({"t": 1, "op": 7, "addr": 5, "size": 1, "stream": 0})"), 3, "\"op\" is not a string");
  expect_error(with(R"({"t": 1, "op": "alloc", "addr": 5, "size": 1, "stream": 0, "x": {"y": 1}})"), 3, "not a plain JSON scalar");
  expect_error(with("{}"), 3, "empty");
  expect_error(with("[]"), 3, "expected '{'");
  std::string nul = R"({"t": 1, "op": "alloc", "addr": 5, "size": 1, "stream": 0, "z": )";
  nul += '\0';
  nul += "}";
  expect_error(with(nul), 3, "not a plain JSON scalar");
  expect_error(with("not json at all"), 3, "expected '{'");
}

TEST(TraceReader, EventsOutOfTimeOrderAreRefused) {
  expect_error(lines({kHeader, ev("alloc", 1, 10, 0, 5), ev("free", 1, 10, 0, 4)}), 3, "time goes backwards (t 4 after t 5 on line 2)");
  EXPECT_NO_THROW(parse_trace(lines({kHeader, ev("alloc", 1, 10, 0, 5), ev("free", 1, 10, 0, 5), ev("alloc", 2, 1, 0, 9)}), "t"));
}

TEST(TraceReader, NumbersFollowTheJsonGrammar) {
  const std::string ok = R"({"t": 1, "op": "alloc", "addr": 4096, "size": 0, "stream": 0, "x": -1.5e+3})";
  EXPECT_NO_THROW(parse_trace(lines({kHeader, ok}), "t"));
  for (const char* bad : {R"({"t": 01, "op": "alloc", "addr": 4096, "size": 1, "stream": 0})",
                          R"({"t": 1, "op": "alloc", "addr": 00, "size": 1, "stream": 0})",
                          R"({"t": 1, "op": "alloc", "addr": 4096, "size": 1, "stream": 0, "x": -})",
                          R"({"t": 1, "op": "alloc", "addr": 4096, "size": 1, "stream": 0, "x": 01})",
                          R"({"t": 1, "op": "alloc", "addr": 4096, "size": 1, "stream": 0, "x": 1.})",
                          R"({"t": 1, "op": "alloc", "addr": 4096, "size": 1, "stream": 0, "x": .5})",
                          R"({"t": 1, "op": "alloc", "addr": 4096, "size": 1, "stream": 0, "x": 1e})",
                          R"({"t": 1, "op": "alloc", "addr": 4096, "size": 1, "stream": 0, "x": +1})",
                          R"({"t": 1, "op": "alloc", "addr": 4096, "size": 1, "stream": 0, "x": --1})"})
    EXPECT_THROW(parse_trace(lines({kHeader, bad}), "t"), TraceError) << bad;
}

TEST(TraceReader, InconsistentEvents) {
  expect_error(lines({kHeader, ev("alloc", 1, 10), ev("free", 2, 10)}), 3, "free of address 0x2 which is not allocated");
  expect_error(lines({kHeader, ev("alloc", 1, 10), ev("alloc", 1, 10)}), 3, "still allocated (alloc on line 2)");
  expect_error(lines({kHeader, ev("alloc", 1, 10), ev("free", 1, 10), ev("free", 1, 10), ev("free_completed", 1, 10)}), 4,
               "already freed on line 3");
  // After its free_completed, too (it was "a free of an address not allocated").
  expect_error(lines({kHeader, ev("alloc", 1, 10), ev("free", 1, 10), ev("free_completed", 1, 10), ev("free", 1, 10)}), 5,
               "double free: address 0x1 was already freed on line 3");
  // Without free_completed the block is gone at its free; a second free is still named a double free.
  expect_error(lines({kHeader, ev("alloc", 1, 10), ev("free", 1, 10), ev("free", 1, 10)}), 4,
               "double free: address 0x1 was already freed on line 3");
  // Frees are remembered for that only while recent (the reader's memory must not grow with the trace):
  // a double free after 2^17 other frees is still refused, as a free of an address not allocated.
  std::string many = lines({kHeader, ev("alloc", 1, 10), ev("free", 1, 10)});
  for (std::uint64_t i = 0; i < (1u << 17); ++i) many += ev("alloc", 4096 * (i + 1), 1) + "\n" + ev("free", 4096 * (i + 1), 1) + "\n";
  expect_error(many + ev("free", 1, 10) + "\n", 4 + (2u << 17), "free of address 0x1 which is not allocated");
  expect_error(lines({kHeader, ev("alloc", 1, 10), ev("free", 1, 10), ev("alloc", 1, 10), ev("free", 1, 10), ev("free", 1, 10)}),
               6, "already freed on line 5");
  expect_error(lines({kHeader, ev("alloc", 1, 10), ev("free", 1, 20)}), 3, "gives size 20 but it was allocated with size 10");
  expect_error(lines({kHeader, ev("alloc", 1, 10), ev("free_completed", 1, 10)}), 3, "before its free");
  expect_error(lines({kHeader, ev("alloc", 1, 10), ev("free", 1, 10), ev("alloc", 1, 10), ev("free_completed", 1, 10)}), 4,
               "waiting for the free_completed");
  expect_error(lines({kHeader, ev("free_completed", 1, 10)}), 2, "not allocated");
  expect_error(lines({kHeader, ev("alloc", 1, UINT64_MAX)}), 2, "more than 1 PiB");
  expect_error(lines({kHeader, ev("alloc", 1, (std::uint64_t(1) << 50) + 1)}), 2, "more than 1 PiB");
  EXPECT_NO_THROW(parse_trace(lines({kHeader, ev("alloc", 1, std::uint64_t(1) << 50)}), "t"));
  // 2^14 blocks of 1 PiB each overflow the live bytes.
  std::string huge = kHeader + "\n";
  for (std::uint64_t i = 1; i <= (1u << 14); ++i) huge += ev("alloc", 4096 * i, std::uint64_t(1) << 50) + "\n";
  expect_error(huge, 1 + (1u << 14), "overflow");
}

}  // namespace
}  // namespace gpumem::trace
