// Device-memory backend: the one boundary between the engine and real (or simulated) memory.
//
// Contract (every implementation passes tests/backends/conformance_test.cpp):
//  - Virtual ranges: reserve(bytes) returns a base aligned to granularity() whose pages are unmapped;
//    release_range() gives it back (all mappings inside must have been unmapped first).
//  - Physical chunks: create_chunk(bytes) (a multiple of granularity()) returns a handle to physical memory
//    (create_paged_chunk: the same in pages of large_page(), see there);
//    map(va, bytes, chunk, offset) makes [va, va+bytes) read/write from chunk[offset, offset+bytes);
//    va, bytes and offset are multiples of granularity(). map_run(va, calls) maps several such calls one
//    after another from va, all or none, and grants access once for the whole run (the costly step on
//    CUDA); each call of the run is one map() for unmap(). unmap(va, bytes) must name exactly one earlier
//    map() call's range. release_chunk() frees a chunk that has no mapping left. release_chunk_part()
//    frees the physical pages [offset, offset+bytes) of a chunk that no mapping covers (the rest of the
//    chunk stays usable; release_chunk() later frees what is left); it returns false, changing nothing,
//    where the backend cannot free part of a chunk. The same physical bytes
//    seen through two mappings are the same memory (host: memfd + mmap(MAP_FIXED); CUDA: cuMem* VMM).
//  - Plain memory: allocate(bytes) / free(ptr) for setups without virtual memory management.
//  - Stream order: record_event(stream) marks the work queued on a stream so far; event_done() tells
//    whether that work has completed; release_event() recycles it. synchronize() waits for all streams,
//    synchronize_stream() for one. The engine calls one of them before it unmaps memory that was freed.
//  - Failures: calls that acquire memory throw OutOfMemoryError when the device is full and BackendError
//    for anything else; they leave no partial state behind. Calls that give memory back are noexcept.
//  - Sharing (CUDA IPC): where supports_sharing(), export_chunk() returns file descriptors, owned by the
//    caller, that stand for a chunk's physical memory (one per physical allocation, in offset order); they
//    can cross to another process over a Unix socket (SCM_RIGHTS). import_chunk() makes a chunk of this
//    backend from such descriptors (it duplicates them; the caller keeps its own) that map() maps and
//    release_chunk() lets go of like any other. The memory lives while any process maps or holds it.
//    Imported chunks take no capacity. Backends that cannot share throw BackendError from both.
//  - Threads: the engine calls the memory functions under its growth lock, one at a time; the event
//    functions, mem_info() and synchronize() may be called from several threads at once.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpumem/errors.hpp"

namespace gpumem {

using DevicePtr = std::uintptr_t;
using StreamId = std::uintptr_t;  // a cudaStream_t as an integer; 0 is the default stream
using ChunkHandle = std::uint64_t;
using EventHandle = std::uint64_t;

struct MemInfo {
  std::size_t free = 0;
  std::size_t total = 0;
};

// Counts of every call that reaches the device, so replays can report what an allocator asked for.
struct BackendCallCounts {
  std::uint64_t reserves = 0, range_releases = 0;
  std::uint64_t creates = 0, maps = 0, unmaps = 0, chunk_releases = 0;
  std::uint64_t plain_allocs = 0, plain_frees = 0;
  std::uint64_t syncs = 0;
  std::uint64_t map_bytes = 0;  // bytes put behind addresses by map(), in all
  // The driver calls behind the calls above, each one counted: on CUDA one cuMemCreate, cuMemMap,
  // cuMemUnmap and cuMemRelease per page (the driver maps a physical allocation only whole) and one
  // cuMemSetAccess per map(); the sim backend counts what CUDA would do; host: one system call each.
  std::uint64_t driver_creates = 0, driver_maps = 0, driver_unmaps = 0, driver_releases = 0, access_sets = 0;
  // Wall time spent inside those driver calls and in stream/device synchronization, in nanoseconds: what
  // each kind of call costs on the running workload (CUDA backend; 0 where no driver is called).
  std::uint64_t create_ns = 0, map_ns = 0, access_ns = 0, unmap_ns = 0, release_ns = 0, sync_ns = 0;
  // Pages created, mapped and made accessible ahead of need on a thread of the backend's own (map_ahead),
  // the time its driver calls took there (not the program's), and how often a page made ahead had to be
  // unmapped again unused (mispredictions; such pages are used again as spares).
  std::uint64_t ahead_pages = 0, ahead_ns = 0, ahead_unused = 0;
  // Bytes of such pages held now (waiting to be used, or spare) and at most: device memory the
  // allocator's reserved count does not show.
  std::uint64_t ahead_held_bytes = 0, ahead_held_peak_bytes = 0;
  // Calls that acquire or give back physical memory or change mappings: what "device calls" reports.
  std::uint64_t device_calls() const {
    return creates + maps + unmaps + chunk_releases + plain_allocs + plain_frees;
  }
  // syncs and sync_ns are bumped by synchronize(), which any thread may call: those go through these.
  static void add_shared(std::uint64_t& counter, std::uint64_t v) noexcept {
    std::atomic_ref<std::uint64_t>(counter).fetch_add(v, std::memory_order_relaxed);
  }
  static std::uint64_t load_shared(const std::uint64_t& counter) noexcept {
    return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(counter)).load(std::memory_order_relaxed);
  }
  // Every driver call that acquires, maps, unmaps, releases memory or sets access.
  std::uint64_t driver_calls() const {
    return driver_creates + driver_maps + driver_unmaps + driver_releases + access_sets + plain_allocs + plain_frees;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const noexcept = 0;
  virtual int device() const noexcept { return 0; }
  // The device's product name where the backend can tell ("NVIDIA H100 80GB HBM3"), else "".
  virtual std::string device_name() const { return {}; }
  virtual std::size_t granularity() const noexcept = 0;
  virtual bool supports_virtual_memory() const noexcept = 0;

  virtual DevicePtr reserve(std::size_t bytes) = 0;
  virtual void release_range(DevicePtr base, std::size_t bytes) noexcept = 0;

  virtual ChunkHandle create_chunk(std::size_t bytes) = 0;
  // Large pages: create_paged_chunk(bytes, large_page()) makes a chunk of physical allocations of
  // large_page() bytes each (a multiple of granularity()), so mapping it costs bytes / large_page() driver
  // calls instead of bytes / granularity(). Such a chunk is mapped, released in part and shared only in
  // whole pages: map / release_chunk_part / export_pages offsets and sizes are multiples of its page.
  // Backends whose pages cost nothing apart keep the default (large_page() == granularity()).
  virtual std::size_t large_page() const noexcept { return granularity(); }
  virtual ChunkHandle create_paged_chunk(std::size_t bytes, std::size_t page) {
    (void)page;
    return create_chunk(bytes);
  }
  // Growth ahead of need (optional; the CUDA backend maps pages on a thread of its own, see
  // src/backends/map_ahead.hpp): the caller's next new chunk will likely be mapped from `va` (reserved,
  // unmapped) on, about `bytes` of it. create_paged_chunk_at(bytes, page, va) is create_paged_chunk for a
  // chunk the caller will map from `va` on, in its pages' order: pages prepared there come already mapped,
  // and map_run() at their own addresses then only records them. Correct whatever the caller does next
  // (any other use of those addresses removes the prepared pages first); only the time differs.
  // map_ahead(0, 0): no growth is expected (the program stopped growing): give back what was prepared.
  virtual void map_ahead(DevicePtr /*va*/, std::size_t /*bytes*/) {}
  virtual ChunkHandle create_paged_chunk_at(std::size_t bytes, std::size_t page, DevicePtr /*va*/) {
    return create_paged_chunk(bytes, page);
  }
  virtual void release_chunk(ChunkHandle chunk) noexcept = 0;
  virtual void map(DevicePtr va, std::size_t bytes, ChunkHandle chunk, std::size_t offset) = 0;
  virtual void unmap(DevicePtr va, std::size_t bytes) noexcept = 0;
  struct MapCall {
    std::size_t bytes = 0;
    ChunkHandle chunk = 0;
    std::size_t offset = 0;
  };
  // One map() per call, in order from va; unmaps what it mapped when one fails, then rethrows.
  virtual void map_run(DevicePtr va, const std::vector<MapCall>& calls);
  virtual bool release_chunk_part(ChunkHandle /*chunk*/, std::size_t /*offset*/, std::size_t /*bytes*/) noexcept {
    return false;
  }

  virtual bool supports_sharing() const noexcept { return false; }
  virtual std::vector<int> export_chunk(ChunkHandle /*chunk*/) {
    throw BackendError(std::string(name()) + " backend: cannot share memory with other processes");
  }
  // What stands for pages [offset, offset+bytes) of a chunk of chunk_bytes: descriptors for import_chunk()
  // of an `imported_bytes` chunk, in which those pages start at `imported_offset`. By default the whole
  // chunk; backends whose pages are separate allocations send only the pages asked for (others may have
  // been released on their own).
  struct ExportedPages {
    std::vector<int> fds;
    std::size_t imported_bytes = 0, imported_offset = 0;
  };
  virtual ExportedPages export_pages(ChunkHandle chunk, std::size_t chunk_bytes, std::size_t offset, std::size_t) {
    return {export_chunk(chunk), chunk_bytes, offset};
  }
  virtual ChunkHandle import_chunk(const std::vector<int>& /*fds*/, std::size_t /*bytes*/) {
    throw BackendError(std::string(name()) + " backend: cannot share memory with other processes");
  }

  virtual DevicePtr allocate(std::size_t bytes) = 0;
  virtual void free(DevicePtr ptr) noexcept = 0;

  virtual MemInfo mem_info() = 0;

  virtual EventHandle record_event(StreamId stream) = 0;
  virtual bool event_done(EventHandle event) = 0;
  virtual void release_event(EventHandle event) noexcept = 0;
  virtual void synchronize() = 0;
  // Waits for the work queued on one stream; backends without streams wait for everything.
  virtual void synchronize_stream(StreamId stream) {
    (void)stream;
    synchronize();
  }

  const BackendCallCounts& call_counts() const noexcept { return counts_; }
  // Brings up to date the counts a thread of the backend's own keeps (map_ahead's worker): readers of
  // call_counts() call it first, serialized with the backend's other calls.
  virtual void refresh_counts() noexcept {}

 protected:
  BackendCallCounts counts_;
};

}  // namespace gpumem
