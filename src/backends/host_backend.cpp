#include "gpumem/host_backend.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <system_error>

namespace gpumem {
namespace {

std::string errno_text(int err) { return std::generic_category().message(err) + " (errno " + std::to_string(err) + ")"; }

// ENOMEM / ENOSPC mean "no memory"; anything else is a backend failure.
[[noreturn]] void throw_syscall(const char* call, int err, const std::string& what) {
  std::string msg = std::string("host backend: ") + call + " failed while " + what + ": " + errno_text(err);
  if (err == ENOMEM || err == ENOSPC) throw OutOfMemoryError(msg);
  throw BackendError(msg);
}

void* as_ptr(DevicePtr p) { return reinterpret_cast<void*>(p); }

// Turns [va, va+bytes) back into reserved, inaccessible pages. Returns errno or 0.
int make_inaccessible(DevicePtr va, std::size_t bytes) noexcept {
  void* p = ::mmap(as_ptr(va), bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? errno : 0;
}

}  // namespace

HostBackend::HostBackend(HostBackendOptions options) : options_(options), events_(options.manual_events) {
  const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
  const std::size_t g = options_.granularity;
  if (g == 0 || (g & (g - 1)) != 0 || g % page != 0)
    throw BackendError("host backend: granularity must be a power of two and a multiple of the page size (" +
                       std::to_string(page) + "), got " + std::to_string(g));
}

HostBackend::~HostBackend() {
  for (auto& [va, m] : mappings_) make_inaccessible(va, m.bytes);
  mappings_.clear();
  for (auto& [base, bytes] : ranges_) ::munmap(as_ptr(base), bytes);
  for (auto& [handle, chunk] : chunks_) ::close(chunk.fd);
  for (auto& [ptr, bytes] : plain_) ::munmap(as_ptr(ptr), bytes);
}

void HostBackend::check_aligned(const char* what, std::size_t value) const {
  if (value % options_.granularity)
    throw BackendError(std::string("host backend: ") + what + " " + std::to_string(value) +
                       " is not a multiple of the granularity " + std::to_string(options_.granularity));
}

void HostBackend::take_capacity(std::size_t bytes, const char* what) {
  std::size_t used = used_.load(std::memory_order_relaxed);
  if (bytes > options_.capacity - used)
    throw OutOfMemoryError(std::string("host backend: ") + what + ": " + format_bytes(bytes) + " requested, " +
                           format_bytes(options_.capacity - used) + " free of " + format_bytes(options_.capacity));
  used_.store(used + bytes, std::memory_order_relaxed);
}

DevicePtr HostBackend::reserve(std::size_t bytes) {
  if (bytes == 0) throw BackendError("host backend: reserve of 0 bytes");
  check_aligned("reserve size", bytes);
  const std::size_t g = options_.granularity;
  if (bytes > SIZE_MAX - g)
    throw OutOfMemoryError("host backend: cannot reserve " + format_bytes(bytes) + " of address space");
  // Over-reserve by one granule, then trim both ends so the base is aligned.
  const std::size_t span = bytes + g;
  void* raw = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) throw_syscall("mmap", errno, "reserving " + format_bytes(bytes) + " of address space");
  const DevicePtr start = reinterpret_cast<DevicePtr>(raw);
  const DevicePtr base = (start + g - 1) / g * g;
  if (base > start) ::munmap(raw, base - start);
  if (start + span > base + bytes) ::munmap(as_ptr(base + bytes), start + span - (base + bytes));
  ranges_.emplace(base, bytes);
  ++counts_.reserves;
  return base;
}

void HostBackend::release_range(DevicePtr base, std::size_t bytes) noexcept {
  auto it = ranges_.find(base);
  if (it == ranges_.end() || it->second != bytes) return;
  // Mappings left inside die with the range; forget them so the chunks' counts stay right.
  for (auto m = mappings_.lower_bound(base); m != mappings_.end() && m->first < base + bytes;) {
    auto next = std::next(m);
    drop_mapping(m);
    m = next;
  }
  ::munmap(as_ptr(base), bytes);
  ranges_.erase(it);
  ++counts_.range_releases;
}

ChunkHandle HostBackend::create_chunk(std::size_t bytes) {
  if (bytes == 0) throw BackendError("host backend: chunk of 0 bytes");
  check_aligned("chunk size", bytes);
  take_capacity(bytes, "device full");
  int fd = ::memfd_create("gpumem-host-chunk", MFD_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    throw_syscall("memfd_create", err, "creating a chunk of " + format_bytes(bytes));
  }
  if (::ftruncate(fd, off_t(bytes)) != 0) {
    int err = errno;
    ::close(fd);
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    throw_syscall("ftruncate", err, "sizing a chunk to " + format_bytes(bytes));
  }
  ChunkHandle handle = next_chunk_++;
  chunks_.emplace(handle, Chunk{fd, bytes, 0});
  ++counts_.creates;
  ++counts_.driver_creates;
  return handle;
}

void HostBackend::release_chunk(ChunkHandle chunk) noexcept {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) return;
  ::close(it->second.fd);  // mappings still alive (a contract violation) keep the memory until unmapped
  used_.fetch_sub(it->second.bytes, std::memory_order_relaxed);
  chunks_.erase(it);
  ++counts_.chunk_releases;
  ++counts_.driver_releases;
}

bool HostBackend::inside_reserved(DevicePtr va, std::size_t bytes) const {
  auto it = ranges_.upper_bound(va);
  if (it == ranges_.begin()) return false;
  --it;
  return va >= it->first && va - it->first <= it->second && bytes <= it->second - (va - it->first);
}

bool HostBackend::overlaps_mapping(DevicePtr va, std::size_t bytes) const {
  auto it = mappings_.lower_bound(va);
  if (it != mappings_.end() && it->first < va + bytes) return true;
  if (it == mappings_.begin()) return false;
  --it;
  return it->first + it->second.bytes > va;
}

void HostBackend::map(DevicePtr va, std::size_t bytes, ChunkHandle chunk, std::size_t offset) {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) throw BackendError("host backend: map of unknown chunk " + std::to_string(chunk));
  if (bytes == 0) throw BackendError("host backend: map of 0 bytes");
  check_aligned("map address", va);
  check_aligned("map size", bytes);
  check_aligned("map offset", offset);
  if (offset > it->second.bytes || bytes > it->second.bytes - offset)
    throw BackendError("host backend: map of " + format_bytes(bytes) + " at offset " + std::to_string(offset) +
                       " runs past the end of a " + format_bytes(it->second.bytes) + " chunk");
  if (!inside_reserved(va, bytes)) throw BackendError("host backend: map target is not inside a reserved range");
  if (overlaps_mapping(va, bytes)) throw BackendError("host backend: map target overlaps an existing mapping");
  void* p = ::mmap(as_ptr(va), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, it->second.fd, off_t(offset));
  if (p == MAP_FAILED) {
    int err = errno;
    make_inaccessible(va, bytes);  // MAP_FIXED may have replaced part of the reservation before failing
    throw_syscall("mmap", err, "mapping " + format_bytes(bytes) + " of a chunk");
  }
  mappings_.emplace(va, Mapping{bytes, chunk});
  ++it->second.mappings;
  ++counts_.maps;
  ++counts_.driver_maps;
}

void HostBackend::drop_mapping(std::map<DevicePtr, Mapping>::iterator it) noexcept {
  auto chunk = chunks_.find(it->second.chunk);
  if (chunk != chunks_.end() && chunk->second.mappings > 0) --chunk->second.mappings;
  mappings_.erase(it);
}

void HostBackend::unmap(DevicePtr va, std::size_t bytes) noexcept {
  auto it = mappings_.find(va);
  if (it == mappings_.end() || it->second.bytes != bytes) return;
  if (int err = make_inaccessible(va, bytes)) {
    // Cannot throw here; the pages stay mapped, which leaks but cannot corrupt. Say so once per failure.
    std::fprintf(stderr, "gpumem: host backend: unmap of %zu bytes failed: %s\n", bytes, errno_text(err).c_str());
  }
  drop_mapping(it);
  ++counts_.unmaps;
  ++counts_.driver_unmaps;
}

DevicePtr HostBackend::allocate(std::size_t bytes) {
  const std::size_t g = options_.granularity;
  if (bytes > SIZE_MAX - g)
    throw OutOfMemoryError("host backend: device full: " + format_bytes(bytes) + " requested");
  const std::size_t rounded = (bytes ? bytes + g - 1 : g) / g * g;
  take_capacity(rounded, "device full");
  void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    used_.fetch_sub(rounded, std::memory_order_relaxed);
    throw_syscall("mmap", err, "allocating " + format_bytes(rounded));
  }
  const DevicePtr ptr = reinterpret_cast<DevicePtr>(p);
  plain_.emplace(ptr, rounded);
  ++counts_.plain_allocs;
  return ptr;
}

void HostBackend::free(DevicePtr ptr) noexcept {
  auto it = plain_.find(ptr);
  if (it == plain_.end()) return;
  ::munmap(as_ptr(ptr), it->second);
  used_.fetch_sub(it->second, std::memory_order_relaxed);
  plain_.erase(it);
  ++counts_.plain_frees;
}

MemInfo HostBackend::mem_info() {
  const std::size_t used = used_.load(std::memory_order_relaxed);
  return {options_.capacity - used, options_.capacity};
}

EventHandle HostBackend::record_event(StreamId stream) { return events_.record(stream); }
bool HostBackend::event_done(EventHandle event) { return events_.done(event); }
void HostBackend::release_event(EventHandle event) noexcept { events_.release(event); }
void HostBackend::synchronize() { events_.complete_all(&counts_.syncs); }
void HostBackend::synchronize_stream(StreamId stream) { events_.complete(stream, &counts_.syncs); }
void HostBackend::complete_stream(StreamId stream) { events_.complete(stream); }
std::size_t HostBackend::pending_events() const { return events_.pending(); }

}  // namespace gpumem
