// Writes gpumem-trace version 1 (see trace.hpp): a header line, then one JSON event per line, gzip
// compressed when the path ends in ".gz". What read_trace() reads back, event for event.
#pragma once
#include <string>

#include "gpumem/trace.hpp"

namespace gpumem::trace {

class TraceWriter {
 public:
  // Throws TraceError with one sentence when the file cannot be created.
  TraceWriter(const std::string& path, const std::string& source, const std::string& device);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // The header's device, until the first event or close() writes the header.
  void set_device(const std::string& device) { device_ = device; }
  const std::string& device() const noexcept { return device_; }
  void write(const Event& event);
  // Flushes and closes; throws TraceError if the data could not be written. Idempotent.
  void close();
  std::size_t events_written() const noexcept { return events_; }

 private:
  void put(const std::string& text);
  void put_header();
  std::string path_, source_, device_;
  bool header_written_ = false;
  void* file_ = nullptr;  // gzFile
  std::size_t events_ = 0;
};

}  // namespace gpumem::trace
