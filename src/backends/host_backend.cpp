#include "gpumem/host_backend.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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
  if (!options_.shared_capacity_file.empty()) {
    int fd = ::open(options_.shared_capacity_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) throw_syscall("open", errno, "opening the shared capacity file " + options_.shared_capacity_file);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || (st.st_size < off_t(sizeof(std::uint64_t)) && ::ftruncate(fd, sizeof(std::uint64_t)) != 0)) {
      int err = errno;
      ::close(fd);
      throw_syscall("ftruncate", err, "sizing the shared capacity file");
    }
    void* p = ::mmap(nullptr, sizeof(std::uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw_syscall("mmap", err, "mapping the shared capacity file");
    shared_used_ = static_cast<std::uint64_t*>(p);
  }
}

HostBackend::~HostBackend() {
  for (auto& [va, m] : mappings_) make_inaccessible(va, m.bytes);
  mappings_.clear();
  for (auto& [base, bytes] : ranges_) ::munmap(as_ptr(base), bytes);
  for (auto& [handle, chunk] : chunks_) ::close(chunk.fd);
  for (auto& [ptr, bytes] : plain_) ::munmap(as_ptr(ptr), bytes);
  if (shared_used_) {
    std::atomic_ref<std::uint64_t>(*shared_used_).fetch_sub(used_.load(), std::memory_order_relaxed);
    ::munmap(shared_used_, sizeof(std::uint64_t));
  }
}

void HostBackend::check_aligned(const char* what, std::size_t value) const {
  if (value % options_.granularity)
    throw BackendError(std::string("host backend: ") + what + " " + std::to_string(value) +
                       " is not a multiple of the granularity " + std::to_string(options_.granularity));
}

std::size_t HostBackend::device_used() const noexcept {
  if (shared_used_) return std::size_t(std::atomic_ref<std::uint64_t>(*shared_used_).load(std::memory_order_relaxed));
  return used_.load(std::memory_order_relaxed);
}

void HostBackend::take_capacity(std::size_t bytes, const char* what) {
  auto refuse = [&](std::size_t used) {
    throw OutOfMemoryError(std::string("host backend: ") + what + ": " + format_bytes(bytes) + " requested, " +
                           format_bytes(options_.capacity - used) + " free of " + format_bytes(options_.capacity));
  };
  if (shared_used_) {
    // Several processes count against one capacity: claim with a compare-and-swap on the shared counter.
    std::atomic_ref<std::uint64_t> shared(*shared_used_);
    std::uint64_t used = shared.load(std::memory_order_relaxed);
    do {
      if (used > options_.capacity || bytes > options_.capacity - used) refuse(std::size_t(used));
    } while (!shared.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    used_.fetch_add(bytes, std::memory_order_relaxed);
    return;
  }
  std::size_t used = used_.load(std::memory_order_relaxed);
  if (bytes > options_.capacity - used) refuse(used);
  used_.store(used + bytes, std::memory_order_relaxed);
}

void HostBackend::give_capacity(std::size_t bytes) noexcept {
  used_.fetch_sub(bytes, std::memory_order_relaxed);
  if (shared_used_) std::atomic_ref<std::uint64_t>(*shared_used_).fetch_sub(bytes, std::memory_order_relaxed);
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
    give_capacity(bytes);
    throw_syscall("memfd_create", err, "creating a chunk of " + format_bytes(bytes));
  }
  if (::ftruncate(fd, off_t(bytes)) != 0) {
    int err = errno;
    ::close(fd);
    give_capacity(bytes);
    throw_syscall("ftruncate", err, "sizing a chunk to " + format_bytes(bytes));
  }
  ChunkHandle handle = next_chunk_++;
  chunks_.emplace(handle, Chunk{fd, bytes, 0});
  ++counts_.creates;
  ++counts_.driver_creates;
  return handle;
}

std::vector<int> HostBackend::export_chunk(ChunkHandle chunk) {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) throw BackendError("host backend: export of unknown chunk " + std::to_string(chunk));
  int fd = ::fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) throw_syscall("fcntl(F_DUPFD_CLOEXEC)", errno, "exporting a chunk");
  it->second.exported = true;
  return {fd};
}

ChunkHandle HostBackend::import_chunk(const std::vector<int>& fds, std::size_t bytes) {
  if (fds.size() != 1)
    throw BackendError("host backend: an imported chunk is one memfd, got " + std::to_string(fds.size()) + " descriptors");
  if (bytes == 0) throw BackendError("host backend: import of 0 bytes");
  check_aligned("imported chunk size", bytes);
  struct stat st{};
  if (::fstat(fds[0], &st) != 0) throw_syscall("fstat", errno, "importing a chunk");
  if (!S_ISREG(st.st_mode) || std::size_t(st.st_size) < bytes)
    throw BackendError("host backend: the imported descriptor is not a memory file of at least " + format_bytes(bytes));
  int fd = ::fcntl(fds[0], F_DUPFD_CLOEXEC, 0);
  if (fd < 0) throw_syscall("fcntl(F_DUPFD_CLOEXEC)", errno, "importing a chunk");
  ChunkHandle handle = next_chunk_++;
  chunks_.emplace(handle, Chunk{fd, bytes, 0, true});
  ++counts_.creates;
  return handle;
}

void HostBackend::release_chunk(ChunkHandle chunk) noexcept {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) return;
  ::close(it->second.fd);  // mappings still alive (a contract violation) keep the memory until unmapped
  if (!it->second.imported) give_capacity(it->second.bytes - it->second.released);
  chunks_.erase(it);
  ++counts_.chunk_releases;
  ++counts_.driver_releases;
}

bool HostBackend::release_chunk_part(ChunkHandle chunk, std::size_t offset, std::size_t bytes) noexcept {
  auto it = chunks_.find(chunk);
  const std::size_t g = options_.granularity;
  // One memfd is all of a chunk's memory, in every process that holds it: once shared, only closing it
  // (release_chunk) lets go, and the memory lives on while another process maps it.
  if (it == chunks_.end() || it->second.imported || it->second.exported || (offset | bytes) % g ||
      offset + bytes > it->second.bytes)
    return false;
  if (::fallocate(it->second.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(offset), off_t(bytes)) != 0)
    return false;
  it->second.released += bytes;
  give_capacity(bytes);
  counts_.driver_releases += bytes / g;
  return true;
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
    give_capacity(rounded);
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
  give_capacity(it->second);
  plain_.erase(it);
  ++counts_.plain_frees;
}

MemInfo HostBackend::mem_info() {
  const std::size_t used = std::min(device_used(), options_.capacity);
  return {options_.capacity - used, options_.capacity};
}

EventHandle HostBackend::record_event(StreamId stream) { return events_.record(stream); }
bool HostBackend::event_done(EventHandle event) { return events_.done(event); }
void HostBackend::release_event(EventHandle event) noexcept { events_.release(event); }
void HostBackend::synchronize() { events_.complete_all(&counts_.syncs); }
void HostBackend::synchronize_stream(StreamId stream) { events_.complete(stream, &counts_.syncs); }
void HostBackend::complete_stream(StreamId stream) { events_.complete(stream); }
void HostBackend::idle_stream(StreamId stream) { events_.idle(stream); }
std::size_t HostBackend::pending_events() const { return events_.pending(); }

}  // namespace gpumem
