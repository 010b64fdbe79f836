// CUDA backends over the driver API (see include/gpumem/cuda_backend.hpp).
#include "gpumem/cuda_backend.hpp"

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backends/call_timer.hpp"
#include "engine/env_switch.hpp"
#include "backends/cuda_driver.hpp"
#include "backends/cuda_events.hpp"
#include "backends/cuda_map_ahead.hpp"
#include "backends/cuda_map_run.hpp"

namespace gpumem {
namespace {

using namespace gpumem::cuda;

constexpr std::size_t kDefaultPage = std::size_t(16) << 20;
constexpr std::size_t kMostAhead = std::size_t(64) << 20;  // the engine's largest growth quantum

class CudaBackend final : public Backend {
 public:
  CudaBackend(int ordinal, CudaMemoryMode mode, std::size_t page_bytes) : ordinal_(ordinal), mode_(mode) {
    const Driver& d = driver();
    int count = 0;
    check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (ordinal < 0 || ordinal >= count)
      throw BackendUnavailableError("CUDA device " + std::to_string(ordinal) + " does not exist (this machine has " +
                                    std::to_string(count) + ")");
    check(d.cuDeviceGet(&device_, ordinal), "cuDeviceGet");
    if (mode == CudaMemoryMode::virtual_memory) {
      int vmm = 0;
      check(d.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device_),
            "cuDeviceGetAttribute");
      if (!vmm)
        throw BackendUnavailableError("CUDA device " + std::to_string(ordinal) +
                                      " does not support virtual memory management; use the cuda-plain backend");
    }
    check(d.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    // Exportable as POSIX file descriptors (CUDA IPC, as PyTorch's expandable segments); create_chunk
    // drops this if the driver refuses it (some containers), and sharing is then unsupported.
    prop_.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop_.location = {CU_MEM_LOCATION_TYPE_DEVICE, ordinal};
    access_.location = prop_.location;
    access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    // Mapped memory is readable only by the devices named in cuMemSetAccess: name every peer that can
    // reach this device too, or copies and kernels across GPUs fail (cudaMemcpyPeer: invalid argument).
    accesses_.push_back(access_);
    if (mode == CudaMemoryMode::virtual_memory) {
      for (int other = 0; other < count; ++other) {
        CUdevice peer = 0;
        int can = 0;
        if (other == ordinal || d.cuDeviceGet(&peer, other) != CUDA_SUCCESS) continue;
        if (d.cuDeviceCanAccessPeer(&can, peer, device_) == CUDA_SUCCESS && can) {
          CUmemAccessDesc a = access_;
          a.location = {CU_MEM_LOCATION_TYPE_DEVICE, other};
          accesses_.push_back(a);
        }
      }
    }
    granularity_ = std::size_t(2) << 20;  // cuMemAlloc's own rounding for large blocks, in plain mode
    if (mode == CudaMemoryMode::virtual_memory) {
      CUresult r = d.cuMemGetAllocationGranularity(&granularity_, &prop_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
      if (r != CUDA_SUCCESS) {
        d.cuDevicePrimaryCtxRelease(device_);
        check(r, "cuMemGetAllocationGranularity");
      }
      // Each physical page costs one cuMemCreate, one cuMemMap and ~34 us of cuMemSetAccess on a busy
      // H100, whatever its size (BENCHMARKS.md): large chunks are made of large pages, the rest of the
      // driver's 2 MiB granules, so stitching and release stay fine-grained where it matters.
      const std::size_t page = page_bytes ? page_bytes : kDefaultPage;
      large_page_ = (page + granularity_ - 1) / granularity_ * granularity_;
      // Off: every page made on the allocating thread. A malformed value was refused before (api/registry).
      const char* ahead = std::getenv("GPUMEM_MAP_AHEAD");
      if (parse_switch(ahead ? ahead : "").value_or(true))
        ahead_.enable(granularity_, [this] { return std::make_unique<AheadCalls>(context_, prop_, accesses_); });
    }
  }

  ~CudaBackend() override {
    const Driver& d = driver();
    {
      ContextGuardNoThrow guard(context_);
      ahead_.shut();
      events_.destroy_all();
    }
    d.cuDevicePrimaryCtxRelease(device_);
  }

  const char* name() const noexcept override { return mode_ == CudaMemoryMode::plain ? "cuda-plain" : "cuda"; }
  int device() const noexcept override { return ordinal_; }
  std::string device_name() const override {
    char name[256] = {};
    return driver().cuDeviceGetName(name, int(sizeof name) - 1, device_) == CUDA_SUCCESS ? name : "";
  }
  std::size_t granularity() const noexcept override { return granularity_; }
  std::size_t large_page() const noexcept override { return large_page_ ? large_page_ : granularity_; }
  bool supports_virtual_memory() const noexcept override { return mode_ == CudaMemoryMode::virtual_memory; }

  DevicePtr reserve(std::size_t bytes) override {
    require_vmm("reserve");
    require_aligned(bytes, "reserve size");
    ContextGuard guard(context_);  // VMM calls need no context on current drivers; older ones did
    CUdeviceptr ptr = 0;
    check(driver().cuMemAddressReserve(&ptr, bytes, granularity_, 0, 0), "cuMemAddressReserve");
    ranges_.emplace(DevicePtr(ptr), bytes);
    ++counts_.reserves;
    return DevicePtr(ptr);
  }

  void release_range(DevicePtr base, std::size_t bytes) noexcept override {
    auto it = ranges_.find(base);
    if (it == ranges_.end() || it->second != bytes) return;  // unknown: the driver would reject or crash on it
    ContextGuardNoThrow guard(context_);
    ahead_.clear(base, bytes);
    ahead_.forget_in(base, bytes);
    if (driver().cuMemAddressFree(CUdeviceptr(base), bytes) == CUDA_SUCCESS) ++counts_.range_releases;
    ranges_.erase(it);
  }

  // Current drivers refuse cuMemMap at a nonzero offset (CUDA_ERROR_NOT_SUPPORTED), so a chunk is one
  // physical allocation per granule: mapping part of a chunk maps those granules' allocations.
  ChunkHandle create_chunk(std::size_t bytes) override { return create_paged_chunk(bytes, granularity_); }

  ChunkHandle create_paged_chunk(std::size_t bytes, std::size_t page) override {
    return create_paged_chunk_at(bytes, page, 0);
  }

  // Pages made ahead at `va` come first (still mapped there: ahead_.premapped()), the rest is created here.
  ChunkHandle create_paged_chunk_at(std::size_t bytes, std::size_t page, DevicePtr va) override {
    require_vmm("create_chunk");
    require_aligned(bytes, "chunk size");
    if (page != granularity_ && page != large_page()) throw BackendError("cuda backend: page size " + std::to_string(page) + " is not offered");
    if (bytes % page) throw BackendError("cuda backend: chunk size " + std::to_string(bytes) + " is not a multiple of its page");
    ContextGuard guard(context_);
    std::vector<CUmemGenericAllocationHandle> pages;
    pages.reserve(bytes / page);
    if (va && page == granularity_) ahead_.take(va, bytes / page, pages);
    try {
      create_pages(bytes / page - pages.size(), page, pages);
    } catch (...) {
      ahead_.forget(pages);
      for (auto h : pages) driver().cuMemRelease(h);
      counts_.driver_releases += pages.size();
      throw;
    }
    ChunkHandle id = next_chunk_++;
    chunks_.emplace(id, Chunk{std::move(pages), page});
    ++counts_.creates;
    return id;
  }

  // Growth ahead of need (backend.hpp): granule pages only, inside one reserved range, up to 64 MiB.
  void map_ahead(DevicePtr va, std::size_t bytes) override {
    if (!ahead_.enabled()) return;
    if (!va || !bytes) return ahead_.give_back();
    bytes = std::min(bytes, kMostAhead) / granularity_ * granularity_;
    bool inside = false;
    for (const auto& [base, size] : ranges_) inside = inside || (va >= base && va + bytes <= base + size);
    if (bytes && inside && !mappings_.count(va)) ahead_.prepare(va, bytes);
  }

  void refresh_counts() noexcept override { ahead_.note(); }

  bool supports_sharing() const noexcept override {
    return mode_ == CudaMemoryMode::virtual_memory && prop_.requestedHandleTypes != 0;
  }

  // One descriptor per page (each page is its own physical allocation).
  std::vector<int> export_chunk(ChunkHandle chunk) override {
    if (!supports_sharing()) return Backend::export_chunk(chunk);
    auto it = chunks_.find(chunk);
    if (it == chunks_.end()) throw BackendError("cuda backend: export of an unknown chunk");
    const std::size_t bytes = it->second.pages.size() * it->second.page;
    return export_pages(chunk, bytes, 0, bytes).fds;
  }

  // Only the pages asked for: the chunk's other pages may have been released on their own.
  ExportedPages export_pages(ChunkHandle chunk, std::size_t, std::size_t offset, std::size_t bytes) override {
    if (!supports_sharing()) return {Backend::export_chunk(chunk), 0, 0};  // throws: cannot share
    auto it = chunks_.find(chunk);
    if (it == chunks_.end()) throw BackendError("cuda backend: export of an unknown chunk");
    const Chunk& c = it->second;
    if (offset % c.page || bytes % c.page || (offset + bytes) / c.page > c.pages.size())
      throw BackendError("cuda backend: export range lies outside its chunk or splits a page");
    ContextGuard guard(context_);
    ExportedPages out;
    out.imported_bytes = bytes;
    for (std::size_t i = offset / c.page; i < (offset + bytes) / c.page; ++i) {
      int fd = -1;
      CUresult r = c.pages[i] ? driver().cuMemExportToShareableHandle(&fd, c.pages[i],
                                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
                                 : CUDA_ERROR_INVALID_VALUE;
      if (r != CUDA_SUCCESS) {
        for (int f : out.fds) ::close(f);
        check(r, "cuMemExportToShareableHandle");
      }
      out.fds.push_back(fd);
    }
    return out;
  }

  ChunkHandle import_chunk(const std::vector<int>& fds, std::size_t bytes) override {
    require_vmm("import_chunk");
    require_aligned(bytes, "imported chunk size");
    // One descriptor per page; the exporter's pages may be large ones.
    if (fds.empty() || bytes % fds.size() || (bytes / fds.size()) % granularity_)
      throw BackendError("cuda backend: " + std::to_string(fds.size()) + " descriptors cannot stand for " +
                         std::to_string(bytes) + " bytes of pages");
    ContextGuard guard(context_);
    std::vector<CUmemGenericAllocationHandle> pages;
    for (int fd : fds) {
      CUmemGenericAllocationHandle h = 0;
      CUresult r = driver().cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(std::intptr_t(fd)),
                                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      if (r != CUDA_SUCCESS) {
        for (auto p : pages) driver().cuMemRelease(p);
        check(r, "cuMemImportFromShareableHandle");
      }
      pages.push_back(h);
    }
    ChunkHandle id = next_chunk_++;
    chunks_.emplace(id, Chunk{std::move(pages), bytes / fds.size()});
    ++counts_.creates;
    return id;
  }

  void release_chunk(ChunkHandle chunk) noexcept override {
    auto it = chunks_.find(chunk);
    if (it == chunks_.end()) return;
    ContextGuardNoThrow guard(context_);
    ahead_.drop();  // memory goes back: nothing to grow into
    ahead_.forget(it->second.pages);
    Timed timed(counts_.release_ns);
    for (auto h : it->second.pages) {
      if (!h) continue;  // released on its own earlier
      driver().cuMemRelease(h);  // the memory goes once its mappings are gone too
      ++counts_.driver_releases;
    }
    chunks_.erase(it);
    ++counts_.chunk_releases;
  }

  void map(DevicePtr va, std::size_t bytes, ChunkHandle chunk, std::size_t offset) override {
    map_run(va, {MapCall{bytes, chunk, offset}});
  }

  // Every page of every call mapped, then access granted once per stretch (cuda_map_run.hpp).
  void map_run(DevicePtr va, const std::vector<MapCall>& calls) override {
    require_vmm("map");
    require_aligned(va, "mapping address");
    std::vector<SizedPage> pages;
    std::size_t run_bytes = 0;
    for (const MapCall& c : calls) {
      auto it = chunks_.find(c.chunk);
      if (it == chunks_.end()) throw BackendError("cuda backend: map of an unknown chunk");
      const Chunk& chunk = it->second;
      if (c.bytes == 0 || c.bytes % chunk.page || c.offset % chunk.page)
        throw BackendError("cuda backend: mapping of " + std::to_string(c.bytes) + " bytes at offset " +
                           std::to_string(c.offset) + " splits a page of " + std::to_string(chunk.page));
      const std::size_t first = c.offset / chunk.page, n = c.bytes / chunk.page;
      if (first + n > chunk.pages.size()) throw BackendError("cuda backend: map range lies outside its chunk");
      for (std::size_t i = first; i < first + n; ++i) {
        if (!chunk.pages[i]) throw BackendError("cuda backend: map of a page that was released");
        pages.emplace_back(chunk.pages[i], chunk.page);
      }
      run_bytes += c.bytes;
    }
    for (std::size_t i = 0, at = 0; i < calls.size(); at += calls[i].bytes, ++i)
      if (mappings_.count(va + at)) throw BackendError("cuda backend: address already mapped");
    ContextGuard guard(context_);
    // Pages made ahead at exactly their address here are mapped with access already; pages made ahead
    // elsewhere, and any other page made ahead in the way, are unmapped from there first.
    const std::vector<char> ready = ahead_.premapped().prepare_run(pages, va, run_bytes, counts_.driver_unmaps);
    ahead_.clear(va, run_bytes);
    map_pages_with_access(va, pages, ready, accesses_, counts_);  // throws with no partial state
    ahead_.premapped().mapped(pages, ready);  // those are mapped for good now: unmap() removes them
    for (std::size_t i = 0, at = 0; i < calls.size(); at += calls[i].bytes, ++i)
      mappings_.emplace(va + at, MappedRange{calls[i].bytes, chunks_.at(calls[i].chunk).page});
    counts_.maps += calls.size();
  }

  // Each page is its own physical allocation: releasing some of them frees exactly those.
  bool release_chunk_part(ChunkHandle chunk, std::size_t offset, std::size_t bytes) noexcept override {
    auto it = chunks_.find(chunk);
    if (it == chunks_.end()) return false;
    Chunk& c = it->second;
    if (offset % c.page || bytes % c.page || (offset + bytes) / c.page > c.pages.size()) return false;
    ContextGuardNoThrow guard(context_);
    ahead_.drop();
    Timed timed(counts_.release_ns);
    for (std::size_t i = offset / c.page; i < (offset + bytes) / c.page; ++i) {
      if (!c.pages[i]) continue;
      ahead_.forget({c.pages[i]});
      driver().cuMemRelease(c.pages[i]);
      c.pages[i] = 0;
      ++counts_.driver_releases;
    }
    return true;
  }

  void unmap(DevicePtr va, std::size_t bytes) noexcept override {
    auto it = mappings_.find(va);
    if (it == mappings_.end() || it->second.bytes != bytes) return;
    const std::size_t page = it->second.page;
    ContextGuardNoThrow guard(context_);
    Timed timed(counts_.unmap_ns);
    for (std::size_t off = 0; off < bytes; off += page) driver().cuMemUnmap(CUdeviceptr(va + off), page);
    counts_.driver_unmaps += bytes / page;
    mappings_.erase(it);
    ++counts_.unmaps;
  }

  DevicePtr allocate(std::size_t bytes) override {
    ContextGuard guard(context_);
    CUdeviceptr ptr = 0;
    check(driver().cuMemAlloc(&ptr, bytes ? bytes : 1), "cuMemAlloc");
    plain_.insert(DevicePtr(ptr));
    ++counts_.plain_allocs;
    return DevicePtr(ptr);
  }

  void free(DevicePtr ptr) noexcept override {
    if (!plain_.erase(ptr)) return;
    ContextGuardNoThrow guard(context_);
    if (driver().cuMemFree(CUdeviceptr(ptr)) == CUDA_SUCCESS) ++counts_.plain_frees;
  }

  MemInfo mem_info() override {
    ContextGuard guard(context_);
    MemInfo info;
    check(driver().cuMemGetInfo(&info.free, &info.total), "cuMemGetInfo");
    return info;
  }

  EventHandle record_event(StreamId stream) override {
    ContextGuard guard(context_);
    return EventHandle(reinterpret_cast<std::uintptr_t>(events_.record(reinterpret_cast<CUstream>(stream), context_)));
  }

  // The handle is the CUevent itself: no table lookup, so concurrent queries need no lock.
  bool event_done(EventHandle event) override {
    CUresult r = driver().cuEventQuery(reinterpret_cast<CUevent>(std::uintptr_t(event)));
    if (r == CUDA_SUCCESS) return true;
    if (r == CUDA_ERROR_NOT_READY) return false;
    check(r, "cuEventQuery");
    return true;
  }

  void release_event(EventHandle event) noexcept override { events_.give(reinterpret_cast<CUevent>(std::uintptr_t(event))); }

  void synchronize() override {
    ContextGuard guard(context_);
    Timed timed(counts_.sync_ns);
    check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
    BackendCallCounts::add_shared(counts_.syncs, 1);
  }

  void synchronize_stream(StreamId stream) override {
    ContextGuard guard(context_);
    Timed timed(counts_.sync_ns);
    check(driver().cuStreamSynchronize(reinterpret_cast<CUstream>(stream)), "cuStreamSynchronize");
    BackendCallCounts::add_shared(counts_.syncs, 1);
  }

  CUcontext context() const noexcept { return context_; }

 private:
  // Appends `n` new pages to `pages` (spares of MapAhead first); on failure releases those it added and
  // throws. When the device is full, pages made ahead are given back first and the call is tried again.
  void create_pages(std::size_t n, std::size_t page, std::vector<CUmemGenericAllocationHandle>& pages) {
    const std::size_t first = pages.size();
    if (page == granularity_) ahead_.take_spares(n, pages);
    Timed timed(counts_.create_ns);
    while (pages.size() < first + n) {
      CUmemGenericAllocationHandle handle = 0;
      CUresult r = driver().cuMemCreate(&handle, page, &prop_, 0);
      ++counts_.driver_creates;
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY && prop_.requestedHandleTypes != 0) {
        prop_.requestedHandleTypes = 0;  // not shareable here: plain chunks from now on
        r = driver().cuMemCreate(&handle, page, &prop_, 0);
        ++counts_.driver_creates;
      }
      if (r == CUDA_ERROR_OUT_OF_MEMORY && ahead_.holds()) {
        ahead_.drop();
        r = driver().cuMemCreate(&handle, page, &prop_, 0);
        ++counts_.driver_creates;
      }
      if (r != CUDA_SUCCESS) {
        for (std::size_t i = first; i < pages.size(); ++i) driver().cuMemRelease(pages[i]);  // no partial state
        counts_.driver_releases += pages.size() - first;
        pages.resize(first);
        check(r, "cuMemCreate");
      }
      pages.push_back(handle);
    }
  }

  void require_vmm(const char* call) const {
    if (mode_ != CudaMemoryMode::virtual_memory)
      throw BackendError(std::string("cuda-plain backend: ") + call + " needs virtual memory management");
  }
  void require_aligned(std::size_t value, const char* what) const {
    if (value == 0 || value % granularity_)
      throw BackendError(std::string("cuda backend: ") + what + " " + std::to_string(value) +
                         " is not a positive multiple of the granularity (" + std::to_string(granularity_) + ")");
  }

  int ordinal_;
  CudaMemoryMode mode_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::size_t granularity_ = 0;
  std::size_t large_page_ = 0;  // pages of large chunks (create_paged_chunk); 0 in plain mode
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  std::vector<CUmemAccessDesc> accesses_;  // this device and every peer that can access it
  // What this backend handed out, so releases of unknown handles are no-ops rather than driver crashes.
  std::unordered_map<DevicePtr, std::size_t> ranges_;  // base -> bytes
  struct MappedRange {
    std::size_t bytes = 0, page = 0;  // page: its chunk's (one cuMemUnmap each)
  };
  std::unordered_map<DevicePtr, MappedRange> mappings_;
  struct Chunk {
    std::vector<CUmemGenericAllocationHandle> pages;  // 0 where released on its own
    std::size_t page = 0;
  };
  std::unordered_map<ChunkHandle, Chunk> chunks_;
  ChunkHandle next_chunk_ = 1;
  AheadGrowth ahead_{counts_};  // growth ahead of need (map_ahead); off in plain mode
  std::unordered_set<DevicePtr> plain_;
  CudaEventPool events_;
};

CudaBackend& as_cuda(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (!cuda) throw BackendError(std::string("backend '") + backend.name() + "' is not a CUDA backend");
  return *cuda;
}

}  // namespace

std::shared_ptr<Backend> make_cuda_backend(int device, CudaMemoryMode mode, std::size_t page_bytes) {
  return std::make_shared<CudaBackend>(device, mode, page_bytes);
}

int cuda_device_count() {
  int count = 0;
  check(driver().cuDeviceGetCount(&count), "cuDeviceGetCount");
  return count;
}

std::string cuda_unavailable_reason() {
  try {
    driver();
    return {};
  } catch (const BackendUnavailableError& e) {
    return e.what();
  }
}

void cuda_copy_to_device(Backend& backend, DevicePtr dst, const void* src, std::size_t bytes) {
  CudaBackend& cuda = as_cuda(backend);
  ContextGuard guard(cuda.context());
  check(driver().cuMemcpyHtoD(CUdeviceptr(dst), src, bytes), "cuMemcpyHtoD");
}

void cuda_copy_to_host(Backend& backend, void* dst, DevicePtr src, std::size_t bytes) {
  CudaBackend& cuda = as_cuda(backend);
  ContextGuard guard(cuda.context());
  check(driver().cuMemcpyDtoH(dst, CUdeviceptr(src), bytes), "cuMemcpyDtoH");
}

}  // namespace gpumem
