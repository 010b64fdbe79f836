#include "api/ipc.hpp"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "api/registry_internal.hpp"

namespace gpumem::api {
namespace {

struct Opened {
  std::shared_ptr<Backend> backend;
  DevicePtr base = 0;
  std::size_t bytes = 0;
  std::vector<std::pair<DevicePtr, std::size_t>> maps;
  std::vector<ChunkHandle> chunks;
};

// Leaked on purpose, as the registry: PyTorch may drop an imported tensor during interpreter exit.
struct Importer {
  std::mutex mutex;
  std::map<int, std::shared_ptr<Backend>> backends;  // device -> backend for imports
  std::map<DevicePtr, Opened> opened;                // address handed out -> what backs it
};
Importer& importer() {
  static auto* instance = new Importer;
  return *instance;
}

void undo(Opened& o) noexcept {
  for (auto [va, bytes] : o.maps) o.backend->unmap(va, bytes);
  for (ChunkHandle c : o.chunks) o.backend->release_chunk(c);
  if (o.base) o.backend->release_range(o.base, o.bytes);
}

std::size_t field(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_unsigned())
    throw std::invalid_argument(std::string("gpumem_ipc_open: the description lacks a number '") + name + "'");
  return it->get<std::size_t>();
}

}  // namespace

ExportedAllocation ipc_export(const void* ptr) {
  Allocator* a = owner_of(ptr);
  if (!a) throw std::invalid_argument("gpumem_ipc_export: the pointer is not a live gpumem allocation");
  Allocator::SharedAllocation shared = a->export_allocation(ptr);
  ExportedAllocation out;
  nlohmann::json pieces = nlohmann::json::array();
  for (const auto& p : shared.pieces) {
    out.fds.insert(out.fds.end(), p.fds.begin(), p.fds.end());
    pieces.push_back({{"fds", p.fds}, {"chunk_bytes", p.chunk_bytes}, {"offset", p.offset}, {"bytes", p.bytes}});
  }
  out.json = nlohmann::json{{"offset", shared.offset}, {"bytes", shared.bytes}, {"pieces", pieces}}.dump();
  return out;
}

void* ipc_open(int device, const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("pieces") || !j["pieces"].is_array())
    throw std::invalid_argument("gpumem_ipc_open: the description is not gpumem_ipc_export's JSON");
  const std::size_t offset = field(j, "offset"), bytes = field(j, "bytes");
  Importer& im = importer();
  std::lock_guard lock(im.mutex);
  auto& backend = im.backends[device];
  if (!backend) backend = make_backend(device);
  if (bytes == 0 || bytes % backend->granularity() || offset >= bytes)
    throw std::invalid_argument("gpumem_ipc_open: " + std::to_string(bytes) +
                                " bytes is not a whole number of this backend's pages");
  Opened o;
  o.backend = backend;
  try {
    o.base = backend->reserve(bytes);
    o.bytes = bytes;
    DevicePtr at = o.base;
    for (const auto& piece : j["pieces"]) {
      const bool descriptors = piece.contains("fds") && piece["fds"].is_array() &&
                               std::all_of(piece["fds"].begin(), piece["fds"].end(),
                                           [](const auto& fd) { return fd.is_number_integer(); });
      if (!descriptors) throw std::invalid_argument("gpumem_ipc_open: a piece lacks its descriptors");
      const std::size_t n = field(piece, "bytes");
      if (at + n > o.base + bytes) throw std::invalid_argument("gpumem_ipc_open: the pieces overrun the pages");
      o.chunks.push_back(backend->import_chunk(piece["fds"].get<std::vector<int>>(), field(piece, "chunk_bytes")));
      backend->map(at, n, o.chunks.back(), field(piece, "offset"));
      o.maps.emplace_back(at, n);
      at += n;
    }
    if (at != o.base + bytes) throw std::invalid_argument("gpumem_ipc_open: the pieces do not cover the pages");
  } catch (...) {
    undo(o);
    throw;
  }
  auto user = o.base + offset;
  im.opened.emplace(user, std::move(o));
  return reinterpret_cast<void*>(user);
}

void ipc_close(void* ptr) {
  Importer& im = importer();
  std::lock_guard lock(im.mutex);
  auto it = im.opened.find(reinterpret_cast<DevicePtr>(ptr));
  if (it == im.opened.end()) throw std::invalid_argument("gpumem_ipc_close: the pointer was not opened by gpumem_ipc_open");
  it->second.backend->synchronize();  // kernels still reading the memory finish before it is unmapped
  undo(it->second);
  im.opened.erase(it);
}

std::size_t ipc_open_count() {
  std::lock_guard lock(importer().mutex);
  return importer().opened.size();
}

}  // namespace gpumem::api
