// `host` backend: real host memory arranged the way GPU virtual memory management arranges it, so tests
// can write data through the engine and read it back.
//  - reserve():      an anonymous PROT_NONE mmap, aligned to the granularity (pages stay inaccessible)
//  - create_chunk(): a memfd of that size (physical memory, only touched pages cost RAM)
//  - map():          mmap(MAP_FIXED | MAP_SHARED) of the memfd into the range, read/write
//  - unmap():        mmap(MAP_FIXED) of PROT_NONE anonymous memory over it, so the range stays reserved
//  - allocate():     a plain anonymous mmap
// Capacity is an accounting limit on chunks + plain allocations (OutOfMemoryError beyond it).
// Host work is synchronous, so events complete at once unless manual_events is set; then a stream's
// events complete only when complete_stream() is called for it, as in the sim backend.
#pragma once
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumem/backend.hpp"
#include "gpumem/stream_tickets.hpp"

namespace gpumem {

struct HostBackendOptions {
  std::size_t capacity = std::size_t(4) << 30;     // accounting limit on physical bytes
  std::size_t granularity = std::size_t(2) << 20;  // power of two, a multiple of the page size
  bool manual_events = false;
  // When set, every HostBackend naming this file (in any process) counts against one capacity, kept in
  // the file as a shared 64-bit counter: a simulated device shared across processes (GPUMEM_HOST_SHARED).
  std::string shared_capacity_file;
  int device = 0;  // the device index it stands for (events and snapshots name it)
};

class HostBackend final : public Backend {
 public:
  explicit HostBackend(HostBackendOptions options = {});
  ~HostBackend() override;  // gives back everything still held
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;

  const char* name() const noexcept override { return "host"; }
  int device() const noexcept override { return options_.device; }
  std::string device_name() const override { return "host memory (test device)"; }
  std::size_t granularity() const noexcept override { return options_.granularity; }
  bool supports_virtual_memory() const noexcept override { return true; }

  DevicePtr reserve(std::size_t bytes) override;
  void release_range(DevicePtr base, std::size_t bytes) noexcept override;
  ChunkHandle create_chunk(std::size_t bytes) override;
  void release_chunk(ChunkHandle chunk) noexcept override;
  void map(DevicePtr va, std::size_t bytes, ChunkHandle chunk, std::size_t offset) override;
  bool supports_sharing() const noexcept override { return true; }
  std::vector<int> export_chunk(ChunkHandle chunk) override;            // a duplicate of its memfd
  ChunkHandle import_chunk(const std::vector<int>& fds, std::size_t bytes) override;
  bool release_chunk_part(ChunkHandle chunk, std::size_t offset, std::size_t bytes) noexcept override;  // punches a hole
  void unmap(DevicePtr va, std::size_t bytes) noexcept override;
  DevicePtr allocate(std::size_t bytes) override;
  void free(DevicePtr ptr) noexcept override;
  MemInfo mem_info() override;
  EventHandle record_event(StreamId stream) override;
  bool event_done(EventHandle event) override;
  void release_event(EventHandle event) noexcept override;
  void synchronize() override;
  void synchronize_stream(StreamId stream) override;

  // Manual event mode: all events recorded so far on `stream` complete.
  void complete_stream(StreamId stream);
  // Manual event mode: `stream` has no work queued from now on: events recorded on it are done at once.
  void idle_stream(StreamId stream);
  std::size_t used_bytes() const noexcept { return used_.load(std::memory_order_relaxed); }
  std::size_t live_ranges() const noexcept { return ranges_.size(); }
  std::size_t live_chunks() const noexcept { return chunks_.size(); }
  std::size_t live_mappings() const noexcept { return mappings_.size(); }
  std::size_t live_plain() const noexcept { return plain_.size(); }
  std::size_t pending_events() const;

 private:
  struct Chunk {
    int fd;
    std::size_t bytes;
    std::size_t mappings;
    bool imported = false;  // another process's memory: takes no capacity here
    std::size_t released = 0;  // bytes punched out by release_chunk_part
    bool exported = false;     // another process may map it: a punched hole would reach into its memory
  };
  struct Mapping {
    std::size_t bytes;
    ChunkHandle chunk;
  };
  void check_aligned(const char* what, std::size_t value) const;
  void take_capacity(std::size_t bytes, const char* what);
  void give_capacity(std::size_t bytes) noexcept;
  std::size_t device_used() const noexcept;
  bool inside_reserved(DevicePtr va, std::size_t bytes) const;
  bool overlaps_mapping(DevicePtr va, std::size_t bytes) const;
  void drop_mapping(std::map<DevicePtr, Mapping>::iterator it) noexcept;

  HostBackendOptions options_;
  std::atomic<std::size_t> used_{0};
  std::uint64_t* shared_used_ = nullptr;  // mapped from shared_capacity_file, else null
  ChunkHandle next_chunk_ = 1;
  std::map<DevicePtr, std::size_t> ranges_;    // reserved base -> bytes
  std::unordered_map<ChunkHandle, Chunk> chunks_;
  std::map<DevicePtr, Mapping> mappings_;       // mapped va -> what is mapped there
  std::unordered_map<DevicePtr, std::size_t> plain_;

  StreamTickets events_;  // events may be polled from several threads: they have their own lock
};

}  // namespace gpumem
