// The CUDA backends join the conformance suite. Without a driver (CI), every CUDA test skips with the
// backend's own one-sentence reason; the tests at the bottom check that reason and the error type.
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>

#include "backends/conformance.hpp"
#include "backends/cuda_driver.hpp"
#ifdef GPUMEM_FAKE_CUDA_DRIVER
#include "backends/fake_cuda/fake_cuda.hpp"
#endif
#include "gpumem/cuda_backend.hpp"
#include "wait_child.hpp"

namespace {

using gpumem::Backend;
using gpumem::CudaMemoryMode;
using gpumem::DevicePtr;
using gpumem::conformance::BackendConformance;
using gpumem::conformance::BackendParams;
using gpumem::conformance::BackendUnderTest;

// The suite names streams by small integers (0, 1, 7, 0x1234); a CUDA stream id is a real cudaStream_t. This
// adapter hands every call to the CUDA backend, turning each nonzero test id into a stream of its own.
class RealStreams final : public Backend {
 public:
  explicit RealStreams(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {
    gpumem::cuda::check(gpumem::cuda::driver().cuDevicePrimaryCtxRetain(&context_, inner_->device()),
                        "cuDevicePrimaryCtxRetain");
  }
  ~RealStreams() override {
    for (auto& [id, s] : streams_) gpumem::cuda::driver().cuStreamDestroy(s);
    gpumem::cuda::driver().cuDevicePrimaryCtxRelease(inner_->device());
  }
  Backend& inner() { return *inner_; }
  const char* name() const noexcept override { return inner_->name(); }
  int device() const noexcept override { return inner_->device(); }
  std::string device_name() const override { return inner_->device_name(); }
  std::size_t granularity() const noexcept override { return inner_->granularity(); }
  bool supports_virtual_memory() const noexcept override { return inner_->supports_virtual_memory(); }
  DevicePtr reserve(std::size_t n) override { return sync(inner_->reserve(n)); }
  void release_range(DevicePtr b, std::size_t n) noexcept override { inner_->release_range(b, n), sync(); }
  gpumem::ChunkHandle create_chunk(std::size_t n) override { return sync(inner_->create_chunk(n)); }
  void release_chunk(gpumem::ChunkHandle c) noexcept override { inner_->release_chunk(c), sync(); }
  void map(DevicePtr va, std::size_t n, gpumem::ChunkHandle c, std::size_t off) override {
    inner_->map(va, n, c, off), sync();
  }
  void unmap(DevicePtr va, std::size_t n) noexcept override { inner_->unmap(va, n), sync(); }
  void map_run(DevicePtr va, const std::vector<MapCall>& calls) override { inner_->map_run(va, calls), sync(); }
  bool release_chunk_part(gpumem::ChunkHandle c, std::size_t off, std::size_t n) noexcept override {
    return sync(inner_->release_chunk_part(c, off, n));
  }
  std::size_t large_page() const noexcept override { return inner_->large_page(); }
  gpumem::ChunkHandle create_paged_chunk(std::size_t n, std::size_t page) override {
    return sync(inner_->create_paged_chunk(n, page));
  }
  bool supports_sharing() const noexcept override { return inner_->supports_sharing(); }
  std::vector<int> export_chunk(gpumem::ChunkHandle c) override { return inner_->export_chunk(c); }
  ExportedPages export_pages(gpumem::ChunkHandle c, std::size_t chunk_bytes, std::size_t off, std::size_t n) override {
    return inner_->export_pages(c, chunk_bytes, off, n);
  }
  gpumem::ChunkHandle import_chunk(const std::vector<int>& fds, std::size_t n) override {
    return sync(inner_->import_chunk(fds, n));
  }
  DevicePtr allocate(std::size_t n) override { return sync(inner_->allocate(n)); }
  void free(DevicePtr p) noexcept override { inner_->free(p), sync(); }
  gpumem::MemInfo mem_info() override { return inner_->mem_info(); }
  gpumem::EventHandle record_event(gpumem::StreamId s) override { return inner_->record_event(real(s)); }
  bool event_done(gpumem::EventHandle e) override { return inner_->event_done(e); }
  void release_event(gpumem::EventHandle e) noexcept override { inner_->release_event(e); }
  void synchronize() override { inner_->synchronize(), sync(); }
  void synchronize_stream(gpumem::StreamId s) override { inner_->synchronize_stream(real(s)), sync(); }

 private:
  template <typename T>
  T sync(T value) {
    counts_ = inner_->call_counts();
    return value;
  }
  void sync() { counts_ = inner_->call_counts(); }
  gpumem::StreamId real(gpumem::StreamId id) {
    if (id == 0) return 0;
    std::lock_guard lock(mutex_);
    auto it = streams_.find(id);
    if (it == streams_.end()) {
      gpumem::cuda::ContextGuard guard(context_);
      gpumem::cuda::CUstream s = nullptr;
      gpumem::cuda::check(gpumem::cuda::driver().cuStreamCreate(&s, 0), "cuStreamCreate");
      it = streams_.emplace(id, s).first;
    }
    return reinterpret_cast<gpumem::StreamId>(it->second);
  }
  std::shared_ptr<Backend> inner_;
  gpumem::cuda::CUcontext context_ = nullptr;
  std::mutex mutex_;
  std::map<gpumem::StreamId, gpumem::cuda::CUstream> streams_;
};

Backend& unwrap(Backend& b) {
  auto* adapter = dynamic_cast<RealStreams*>(&b);
  return adapter ? adapter->inner() : b;
}

BackendUnderTest cuda(CudaMemoryMode mode) {
  BackendUnderTest b;
  b.name = mode == CudaMemoryMode::plain ? "cuda_plain" : "cuda";
  b.factory = [mode](const BackendParams& params) -> std::shared_ptr<Backend> {
    auto backend = gpumem::make_cuda_backend(0, mode);  // loads the driver
#ifdef GPUMEM_FAKE_CUDA_DRIVER
    gpumem::testing::fake_cuda_hold_work(params.manual_events);
#else
    (void)params;
#endif
    return std::make_shared<RealStreams>(std::move(backend));
  };
  b.has_real_memory = true;
  b.copy_in = [](Backend& be, DevicePtr dst, const void* src, std::size_t n) {
    gpumem::cuda_copy_to_device(unwrap(be), dst, src, n);
  };
  b.copy_out = [](Backend& be, void* dst, DevicePtr src, std::size_t n) {
    gpumem::cuda_copy_to_host(unwrap(be), dst, src, n);
  };
  b.honors_capacity = false;  // a real GPU has the capacity it has
#ifdef GPUMEM_FAKE_CUDA_DRIVER
  // The driver double holds recorded work pending until its stream is synchronized (a GPU runs it).
  b.complete_stream = [](Backend& be, gpumem::StreamId s) { be.synchronize_stream(s); };
#endif
  return b;
}

// One sentence: no line breaks, and it names CUDA so the user knows what is missing.
void expect_one_sentence(const std::string& message) {
  EXPECT_FALSE(message.empty());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find("CUDA"), std::string::npos) << message;
}

// Runs fn in a forked child and returns the string it produced.
template <typename Fn>
std::string in_child(Fn fn) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string out = fn();
    ssize_t ignored = write(fds[1], out.data(), out.size());
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  using namespace gpumem::testing;
  const bool closed = read_until_closed(fds[0], out, std::chrono::steady_clock::now() + kChildDeadline);
  close(fds[0]);
  int status = 0;
  if (!wait_child(pid, &status) || !closed) return "the child did not finish in time";
  return out;
}

TEST(CudaDriver, MissingLibraryGivesOneClearSentence) {
  std::string why = gpumem::cuda::probe_driver("/nonexistent/gpumem-test/libcuda.so.1");
  expect_one_sentence(why);
  EXPECT_NE(why.find("could not be loaded"), std::string::npos) << why;
}

TEST(CudaDriver, StubLibraryIsRejectedAtInit) {
  // The CUDA toolkit's link stub exports every symbol but fails cuInit: the loader must say so, not crash.
  const char* stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) != 0) GTEST_SKIP() << "no CUDA toolkit stub at " << stub;
  // In a child: the stub's soname is libcuda.so.1, and once loaded it would shadow the real driver here.
  std::string why = in_child([stub] { return gpumem::cuda::probe_driver(stub); });
  expect_one_sentence(why);
  EXPECT_NE(why.find("stub"), std::string::npos) << why;
}

TEST(CudaDriver, NoDriverMeansBackendUnavailable) {
  std::string why = gpumem::cuda_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "a CUDA driver is present here; the no-driver path is covered on machines without one";
  for (auto mode : {CudaMemoryMode::virtual_memory, CudaMemoryMode::plain}) {
    try {
      gpumem::make_cuda_backend(0, mode);
      FAIL() << "make_cuda_backend succeeded without a driver";
    } catch (const gpumem::BackendUnavailableError& e) {
      EXPECT_EQ(std::string(e.what()), why);
      expect_one_sentence(e.what());
    }
  }
  EXPECT_THROW(gpumem::cuda_device_count(), gpumem::BackendUnavailableError);
}

TEST(CudaDriver, NonexistentDeviceIsUnavailable) {
  if (!gpumem::cuda_unavailable_reason().empty()) GTEST_SKIP() << gpumem::cuda_unavailable_reason();
  int count = gpumem::cuda_device_count();
  try {
    gpumem::make_cuda_backend(count);
    FAIL() << "device " << count << " should not exist";
  } catch (const gpumem::BackendUnavailableError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Cuda, BackendConformance,
                         ::testing::Values(cuda(CudaMemoryMode::virtual_memory), cuda(CudaMemoryMode::plain)),
                         gpumem::conformance::ConformanceName{});
