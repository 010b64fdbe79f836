// The C ABI of include/gpumem/gpumem_history.h, over report/history and report/torch_snapshot.
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "api/c_api_internal.hpp"
#include "gpumem/gpumem.h"
#include "gpumem/gpumem_history.h"
#include "gpumem/printable.hpp"
#include "report/history.hpp"

namespace {
using namespace gpumem;

template <typename Fn>
int guarded(Fn&& fn) noexcept {
  try {
    fn();
    return GPUMEM_OK;
  } catch (const std::invalid_argument& e) {
    api::set_last_error(e.what());
    return GPUMEM_E_INVALID;
  } catch (const std::exception& e) {
    api::set_last_error(e.what());
    return GPUMEM_E_INTERNAL;
  } catch (...) {
    api::set_last_error("gpumem: internal error of unknown kind");
    return GPUMEM_E_INTERNAL;
  }
}

std::vector<report::Frame> unpack_frames(const char* packed) {
  std::vector<report::Frame> frames;
  std::string_view rest(packed);
  while (!rest.empty()) {
    std::size_t end = rest.find('\x1e');
    std::string_view record = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    std::size_t a = record.find('\x1f'), b = a == std::string_view::npos ? a : record.find('\x1f', a + 1);
    if (b == std::string_view::npos) throw std::invalid_argument("gpumem: a frame needs filename, line and name");
    report::Frame f;
    f.filename = std::string(record.substr(0, a));
    f.line = std::atoi(std::string(record.substr(a + 1, b - a - 1)).c_str());
    f.name = std::string(record.substr(b + 1));
    frames.push_back(std::move(f));
  }
  return frames;
}
}  // namespace

extern "C" {

int gpumem_history_start(size_t max_entries, int context, int stacks, gpumem_frame_source source) {
  return guarded([&] {
    if (stacks && !source) throw std::invalid_argument("gpumem: recording stacks needs a frame source");
    report::HistoryOptions o;
    o.max_entries = max_entries;
    o.context = context != 0;
    o.stacks = stacks != 0;
    report::process_history().start(o, source);
  });
}

int gpumem_history_stop(void) {
  return guarded([] { report::process_history().stop(); });
}

int gpumem_history_clear(void) {
  return guarded([] { report::process_history().clear(); });
}

int gpumem_history_set_frames(const char* packed) {
  // File and function names go into the pickle as UTF-8 strings: other bytes would make it unreadable.
  return guarded([&] { report::MemoryHistory::set_thread_frames(unpack_frames(valid_utf8(packed ? packed : "").c_str())); });
}

int gpumem_snapshot_write(const char* path) {
  return guarded([&] {
    if (!path || !*path) throw std::invalid_argument("gpumem: gpumem_snapshot_write needs a file path");
    report::write_torch_snapshot_file(report::process_history().torch_snapshot(), path);
  });
}

void* gpumem_snapshot_pickle(size_t* len) {
  void* buffer = nullptr;
  int rc = guarded([&] {
    if (!len) throw std::invalid_argument("gpumem: gpumem_snapshot_pickle needs len");
    std::ostringstream out;
    report::write_torch_snapshot(report::process_history().torch_snapshot(), out);
    std::string bytes = std::move(out).str();
    buffer = std::malloc(bytes.size() ? bytes.size() : 1);
    if (!buffer) throw std::runtime_error("gpumem: out of host memory for the snapshot");
    std::memcpy(buffer, bytes.data(), bytes.size());
    *len = bytes.size();
  });
  return rc == GPUMEM_OK ? buffer : nullptr;
}

void gpumem_buffer_free(void* buffer) { std::free(buffer); }

}  // extern "C"
