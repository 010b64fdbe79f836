#include "gpumem/fault_injection_backend.hpp"

#include <string>

namespace gpumem {
namespace {

const char* call_name(int call) {
  static const char* const names[] = {"reserve", "create_chunk", "map", "allocate", "record_event"};
  return names[call];
}

}  // namespace

FaultInjectionBackend::FaultInjectionBackend(std::shared_ptr<Backend> inner, FaultInjectionOptions options)
    : inner_(std::move(inner)), kind_(options.kind), fail_at_(options.fail_at), persistent_(options.persistent) {
  if (!inner_) throw BackendError("fault injection backend: no backend to wrap");
  mirror_counts();
}

void FaultInjectionBackend::refresh_counts() noexcept {
  inner_->refresh_counts();
  mirror_counts();
}

void FaultInjectionBackend::mirror_counts() noexcept {
  std::lock_guard<std::mutex> lock(counts_mutex_);
  counts_ = inner_->call_counts();
}

void FaultInjectionBackend::arm(std::uint64_t fail_at, bool persistent) {
  persistent_.store(persistent);
  fail_at_.store(fail_at);
  calls_.store(0);
}

void FaultInjectionBackend::maybe_fail(Call call) {
  const std::uint64_t n = calls_.fetch_add(1) + 1;
  const std::uint64_t at = fail_at_.load();
  if (at == 0 || n < at || (n > at && !persistent_.load())) return;
  failures_.fetch_add(1);
  const std::string msg = std::string("injected failure of ") + call_name(int(call)) + " (fallible call #" +
                          std::to_string(n) + ")";
  const bool acquires = call == Call::create_chunk || call == Call::allocate;
  if (kind_ == FaultKind::out_of_memory || (kind_ == FaultKind::natural && acquires)) throw OutOfMemoryError(msg);
  throw BackendError(msg);
}

DevicePtr FaultInjectionBackend::reserve(std::size_t bytes) {
  maybe_fail(Call::reserve);
  DevicePtr p = inner_->reserve(bytes);
  mirror_counts();
  return p;
}

void FaultInjectionBackend::release_range(DevicePtr base, std::size_t bytes) noexcept {
  inner_->release_range(base, bytes);
  mirror_counts();
}

ChunkHandle FaultInjectionBackend::create_chunk(std::size_t bytes) {
  maybe_fail(Call::create_chunk);
  ChunkHandle c = inner_->create_chunk(bytes);
  mirror_counts();
  return c;
}

ChunkHandle FaultInjectionBackend::create_paged_chunk(std::size_t bytes, std::size_t page) {
  maybe_fail(Call::create_chunk);
  ChunkHandle c = inner_->create_paged_chunk(bytes, page);
  mirror_counts();
  return c;
}

void FaultInjectionBackend::release_chunk(ChunkHandle chunk) noexcept {
  inner_->release_chunk(chunk);
  mirror_counts();
}

bool FaultInjectionBackend::release_chunk_part(ChunkHandle chunk, std::size_t offset, std::size_t bytes) noexcept {
  bool done = inner_->release_chunk_part(chunk, offset, bytes);
  mirror_counts();
  return done;
}

void FaultInjectionBackend::map(DevicePtr va, std::size_t bytes, ChunkHandle chunk, std::size_t offset) {
  maybe_fail(Call::map);
  inner_->map(va, bytes, chunk, offset);
  mirror_counts();
}

void FaultInjectionBackend::unmap(DevicePtr va, std::size_t bytes) noexcept {
  inner_->unmap(va, bytes);
  mirror_counts();
}

DevicePtr FaultInjectionBackend::allocate(std::size_t bytes) {
  maybe_fail(Call::allocate);
  DevicePtr p = inner_->allocate(bytes);
  mirror_counts();
  return p;
}

void FaultInjectionBackend::free(DevicePtr ptr) noexcept {
  inner_->free(ptr);
  mirror_counts();
}

// Events do not change the call counts, so they are not mirrored (they may run on several threads).
EventHandle FaultInjectionBackend::record_event(StreamId stream) {
  maybe_fail(Call::record_event);
  return inner_->record_event(stream);
}

void FaultInjectionBackend::release_event(EventHandle event) noexcept { inner_->release_event(event); }

void FaultInjectionBackend::synchronize() {
  inner_->synchronize();
  mirror_counts();
}

void FaultInjectionBackend::synchronize_stream(StreamId stream) {
  inner_->synchronize_stream(stream);
  mirror_counts();
}

}  // namespace gpumem
