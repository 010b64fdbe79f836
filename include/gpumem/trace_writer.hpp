// Writes gpumem-trace version 2 (see trace.hpp): a header line, then one JSON event per line, then at
// close() the end record, gzip compressed when the path ends in ".gz". What read_trace() reads back, event
// for event.
//
// The writing thread only formats lines into a buffer; full buffers (1 MiB) are compressed and written
// by a thread of the writer's own, in order, at most a few buffers behind (then write() waits), so a
// program that records its allocations pays ~0.5 us per event instead of ~2 us (bench/trace_bench).
// flush() (the recorder calls it about once a second) has that thread write what is pending too and flush
// the file (gzip: Z_SYNC_FLUSH), so that a process killed later leaves a trace readable up to there.
// A child made by fork() never writes its parent's file: its copy of the writer is dropped unwritten.
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "gpumem/trace.hpp"

namespace gpumem::trace {

class TraceWriter {
 public:
  // Throws TraceError with one sentence when the file cannot be created. A file another process is
  // writing (each process of a job inherits GPUMEM_TRACE) is left to it: this one writes PATH with its pid
  // before the extension ("trace.jsonl.gz" -> "trace.1234.jsonl.gz"); path() and redirected() say so.
  // Within one process a second writer of a file is not detected (the recorder closes the first).
  TraceWriter(const std::string& path, const std::string& source, const std::string& device);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // The header's device, until the first event or close() writes the header.
  void set_device(const std::string& device) { device_ = device; }
  const std::string& device() const noexcept { return device_; }
  void write(const Event& event);
  // Hands what was written since the last flush to the writer's thread, which writes it and flushes the
  // file: a process killed after that leaves a file that reads back to here (a gzip file through
  // Z_SYNC_FLUSH, without its trailer). Returns without waiting for the disk; nothing to do when nothing
  // was written since. Like write(), not to be called concurrently with the writer's other methods.
  void flush();
  // Flushes and closes; throws TraceError if the data could not be written. Idempotent.
  void close();
  std::size_t events_written() const noexcept { return events_; }
  const std::string& path() const noexcept { return path_; }
  // True if `path` names the file this writer writes (however it is spelled).
  bool writes(const std::string& path) const;
  bool redirected() const noexcept { return redirected_; }

 private:
  struct Compressor;  // the thread that compresses and writes full buffers
  void put(const char* text, std::size_t size);
  void put_header();
  void hand_off(bool sync);
  bool forked() const noexcept;
  // In a forked child: the file and the compressor are the parent's (its thread does not exist here),
  // so they are let go of, never closed, joined or freed.
  void let_go_of_parents() noexcept;
  // Stops the compressor (what it holds written), writes what is pending when `flush`, closes the file.
  // Returns why it failed, or nullptr.
  const char* shut(bool flush);
  std::string path_, source_, device_;
  bool header_written_ = false;
  bool unflushed_ = false;  // written since the last flush()
  bool redirected_ = false;
  std::pair<std::uint64_t, std::uint64_t> file_id_{};  // st_dev, st_ino
  void* file_ = nullptr;  // gzFile
  std::size_t events_ = 0;
  std::string pending_;  // formatted, not yet handed to the compressor
  std::unique_ptr<Compressor> compressor_;
  int owner_pid_ = 0;
};

}  // namespace gpumem::trace
