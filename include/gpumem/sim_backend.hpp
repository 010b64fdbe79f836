// `sim` backend: accounting only. No memory is touched; addresses are synthetic but unique and aligned,
// capacity is whatever you set, so a 14 GB trace replays on a small machine in seconds.
// Events complete at once unless manual_events is set; then a stream's events complete only when
// complete_stream() is called for it (tests use this to hold blocks on "busy" streams).
#pragma once
#include <atomic>
#include <set>
#include <unordered_map>
#include <vector>

#include "gpumem/backend.hpp"
#include "gpumem/stream_tickets.hpp"

namespace gpumem {

struct SimBackendOptions {
  std::size_t capacity = std::size_t(80) << 30;  // bytes of physical memory the simulated device has
  std::size_t granularity = std::size_t(2) << 20;
  std::size_t large_page = 0;  // Backend::large_page(); 0: granularity (every page the same)
  bool virtual_memory = true;
  bool manual_events = false;
  // Growth ahead of need as the CUDA backend makes it (Backend::map_ahead), counted only: pages made
  // ahead take capacity while they wait; taken, they are the next chunk's; in the way, they are dropped.
  bool map_ahead = false;
  int device = 0;  // the device index it stands for (events and snapshots name it)
};

class SimBackend final : public Backend {
 public:
  explicit SimBackend(SimBackendOptions options = {});
  const char* name() const noexcept override { return "sim"; }
  int device() const noexcept override { return options_.device; }
  std::string device_name() const override { return "simulated device"; }
  std::size_t granularity() const noexcept override { return options_.granularity; }
  bool supports_virtual_memory() const noexcept override { return options_.virtual_memory; }

  DevicePtr reserve(std::size_t bytes) override;
  void release_range(DevicePtr base, std::size_t bytes) noexcept override;
  ChunkHandle create_chunk(std::size_t bytes) override;
  std::size_t large_page() const noexcept override { return options_.large_page; }
  ChunkHandle create_paged_chunk(std::size_t bytes, std::size_t page) override;
  void map_ahead(DevicePtr va, std::size_t bytes) override;
  ChunkHandle create_paged_chunk_at(std::size_t bytes, std::size_t page, DevicePtr va) override;
  void release_chunk(ChunkHandle chunk) noexcept override;
  void map(DevicePtr va, std::size_t bytes, ChunkHandle chunk, std::size_t offset) override;
  void unmap(DevicePtr va, std::size_t bytes) noexcept override;
  void map_run(DevicePtr va, const std::vector<MapCall>& calls) override;  // one access-set per run, as CUDA
  bool release_chunk_part(ChunkHandle chunk, std::size_t offset, std::size_t bytes) noexcept override;
  DevicePtr allocate(std::size_t bytes) override;
  void free(DevicePtr ptr) noexcept override;
  MemInfo mem_info() override;
  EventHandle record_event(StreamId stream) override;
  bool event_done(EventHandle event) override;
  void release_event(EventHandle event) noexcept override;
  void synchronize() override;

  // Manual event mode: all events recorded so far on `stream` complete.
  void complete_stream(StreamId stream);
  std::size_t used_bytes() const noexcept { return used_; }
  // The most device memory taken at once: chunks, plain segments and pages made ahead while they wait.
  std::size_t peak_used_bytes() const noexcept { return peak_used_; }
  std::size_t live_chunks() const noexcept { return chunks_.size(); }
  std::size_t live_mappings() const noexcept { return mappings_.size(); }
  std::size_t pending_events() const noexcept;

 private:
  SimBackendOptions options_;
  std::atomic<std::size_t> used_{0};  // read by mem_info() from any thread
  std::atomic<std::size_t> peak_used_{0};
  void take_capacity(std::size_t bytes) noexcept;  // used_ += bytes, peak_used_ kept
  DevicePtr next_va_;
  ChunkHandle next_chunk_ = 1;
  struct Chunk {
    std::size_t bytes = 0, page = 0;
  };
  std::unordered_map<ChunkHandle, Chunk> chunks_;
  std::unordered_map<DevicePtr, std::size_t> mappings_;          // va -> bytes
  std::unordered_map<DevicePtr, std::size_t> plain_;             // plain allocations
  std::unordered_map<ChunkHandle, std::size_t> chunk_map_count_; // mappings per chunk
  std::unordered_map<DevicePtr, ChunkHandle> mapping_chunk_;
  std::set<std::pair<ChunkHandle, std::size_t>> released_pages_;  // (chunk, offset) freed on their own
  StreamTickets events_;
  DevicePtr ahead_va_ = 0;  // pages made ahead: where they start, how many
  std::size_t ahead_pages_ = 0;
  void drop_ahead(DevicePtr va = 0, std::size_t bytes = 0) noexcept;  // those in [va, va+bytes), or all
};

}  // namespace gpumem
