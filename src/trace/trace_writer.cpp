#include "gpumem/trace_writer.hpp"

#include <zlib.h>

#include <cstdio>
#include <nlohmann/json.hpp>

namespace gpumem::trace {
namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

TraceWriter::TraceWriter(const std::string& path, const std::string& source, const std::string& device)
    : path_(path), source_(source), device_(device) {
  // "wbT" writes plain text through the same calls; gzip level 6 otherwise.
  file_ = gzopen(path.c_str(), ends_with(path, ".gz") ? "wb6" : "wbT");
  if (!file_) throw TraceError(path, 0, "cannot create the trace file");
}

void TraceWriter::put_header() {
  nlohmann::json header = {{"format", "gpumem-trace"}, {"version", 1}, {"source", source_}, {"device", device_}};
  header_written_ = true;
  put(header.dump() + "\n");
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
  put(std::string(line, std::size_t(n)));
  ++events_;
}

void TraceWriter::put(const std::string& text) {
  if (!file_) throw TraceError(path_, 0, "the trace file is already closed");
  if (gzwrite(static_cast<gzFile>(file_), text.data(), unsigned(text.size())) != int(text.size()))
    throw TraceError(path_, 0, "cannot write the trace file (disk full?)");
}

void TraceWriter::close() {
  if (!file_) return;
  if (!header_written_) put_header();  // a trace without events still starts with its header
  int rc = gzclose(static_cast<gzFile>(file_));
  file_ = nullptr;
  if (rc != Z_OK) throw TraceError(path_, 0, "cannot finish the trace file");
}

}  // namespace gpumem::trace
