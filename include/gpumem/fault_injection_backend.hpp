// A Backend wrapper that makes one chosen call fail, for tests that check the engine neither leaks nor
// corrupts when the device says no at any point.
// Fallible calls are counted (reserve, create_chunk, map, allocate, record_event, from 1); the call whose
// number is fail_at throws instead of reaching the wrapped backend (and, with persistent set, every
// fallible call after it too). Everything else is forwarded unchanged, and call_counts() mirrors the
// wrapped backend's. Counting is atomic, so the wrapper adds no races of its own.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>

#include "gpumem/backend.hpp"

namespace gpumem {

enum class FaultKind {
  natural,        // OutOfMemoryError from create_chunk / allocate, BackendError from the others
  out_of_memory,  // always OutOfMemoryError
  backend_error,  // always BackendError
};

struct FaultInjectionOptions {
  std::uint64_t fail_at = 0;  // 0: never fail
  bool persistent = false;    // fail every fallible call from fail_at on
  FaultKind kind = FaultKind::natural;
};

class FaultInjectionBackend final : public Backend {
 public:
  FaultInjectionBackend(std::shared_ptr<Backend> inner, FaultInjectionOptions options = {});

  const char* name() const noexcept override { return inner_->name(); }
  std::string device_name() const override { return inner_->device_name(); }
  int device() const noexcept override { return inner_->device(); }
  std::size_t granularity() const noexcept override { return inner_->granularity(); }
  bool supports_virtual_memory() const noexcept override { return inner_->supports_virtual_memory(); }

  DevicePtr reserve(std::size_t bytes) override;
  void release_range(DevicePtr base, std::size_t bytes) noexcept override;
  ChunkHandle create_chunk(std::size_t bytes) override;
  std::size_t large_page() const noexcept override { return inner_->large_page(); }
  ChunkHandle create_paged_chunk(std::size_t bytes, std::size_t page) override;
  void release_chunk(ChunkHandle chunk) noexcept override;
  bool release_chunk_part(ChunkHandle chunk, std::size_t offset, std::size_t bytes) noexcept override;
  void map(DevicePtr va, std::size_t bytes, ChunkHandle chunk, std::size_t offset) override;
  void unmap(DevicePtr va, std::size_t bytes) noexcept override;
  DevicePtr allocate(std::size_t bytes) override;
  void free(DevicePtr ptr) noexcept override;
  MemInfo mem_info() override { return inner_->mem_info(); }
  EventHandle record_event(StreamId stream) override;
  bool event_done(EventHandle event) override { return inner_->event_done(event); }
  void release_event(EventHandle event) noexcept override;
  void synchronize() override;
  void synchronize_stream(StreamId stream) override;
  void refresh_counts() noexcept override;

  // Restarts the count: the fail_at-th fallible call from now on fails (0 disarms).
  void arm(std::uint64_t fail_at, bool persistent = false);
  std::uint64_t fallible_calls() const noexcept { return calls_.load(); }
  std::uint64_t injected_failures() const noexcept { return failures_.load(); }
  Backend& inner() const noexcept { return *inner_; }

 private:
  enum class Call { reserve, create_chunk, map, allocate, record_event };
  void maybe_fail(Call call);
  void mirror_counts() noexcept;

  std::shared_ptr<Backend> inner_;
  FaultKind kind_;
  std::atomic<std::uint64_t> fail_at_;
  std::atomic<bool> persistent_;
  std::atomic<std::uint64_t> calls_{0};
  std::atomic<std::uint64_t> failures_{0};
  std::mutex counts_mutex_;  // synchronize() may run on several threads at once
};

}  // namespace gpumem
