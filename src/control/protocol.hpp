// The control channel's wire format, shared by the server (inside a gpumem process) and the client.
//
// Contract:
//  - One request, one answer per connection. Each message is a frame: a 4-byte big-endian length, then
//    that many bytes of UTF-8 JSON holding one object.
//  - Requests are at most kMaxRequestBytes; answers at most kMaxAnswerBytes. A bigger frame is refused.
//  - Every request and answer carries "v": kProtocolVersion. A request names its operation in "op":
//      stats                      -> {"devices": [DeviceReport...], "pid", "backend"}
//      clear                      -> {"released_bytes"}        (empty_cache on every device)
//      reset                      -> {}                        (peak statistics reset on every device)
//      limit  {"device", "bytes"|"fraction"} -> {"limit_bytes", "reserved_bytes", "released_bytes", "fits"}
//      stop                       -> {"released_bytes"}        (cache released, then SIGINT to the process)
//      release {"device_key"}     -> {"released_bytes"}        (cooperative release: free cache of that GPU)
//      snapshot {"format": "pickle"|"json", "device"?}         (the process's memory snapshot, streamed)
//                                 -> {"format", "devices", "segments", "blocks", "active_blocks"}, then
//         the document as data frames (raw bytes, 1 to kSnapshotChunkBytes each; not JSON), an empty frame
//         that ends it, and a trailer answer {"bytes"} (or an error answer: the document is incomplete).
//         "pickle" is the dict torch.cuda.memory._snapshot() returns; "json" is gpumem's own.
//         Without "device" every device the process has; with it, that one (an error if it has none).
//  - Answers have "ok": true, or "ok": false and "error": one sentence. A malformed, oversized or unknown
//    request gets such an error answer; the server goes on.
//  - Adding an operation keeps the version: an older server answers "unknown operation".
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace gpumem::control {

inline constexpr int kProtocolVersion = 1;
inline constexpr std::size_t kMaxRequestBytes = 64 * 1024;
inline constexpr std::size_t kMaxAnswerBytes = std::size_t(64) << 20;
inline constexpr std::size_t kSnapshotChunkBytes = 256 * 1024;

enum class Op { stats, clear, reset, limit, stop, release, snapshot };
enum class SnapshotFormat { pickle, json };
const char* snapshot_format_name(SnapshotFormat format) noexcept;

struct Request {
  Op op = Op::stats;
  int device = 0;                       // limit: which device
  std::optional<std::uint64_t> bytes;   // limit: absolute cap (0 removes it)
  std::optional<double> fraction;       // limit: (0, 1] of the device's memory
  std::string device_key;               // release: which physical GPU
  SnapshotFormat format = SnapshotFormat::pickle;  // snapshot
  std::optional<int> snapshot_device;   // snapshot: one device only
};

// Parses and validates one request body. Returns the request, or sets `error` to one sentence.
std::optional<Request> parse_request(std::string_view body, std::string& error);
nlohmann::json request_json(const Request& request);

// JSON text for the wire: invalid UTF-8 from a peer is replaced, never a reason to throw.
std::string to_wire(const nlohmann::json& message);

nlohmann::json ok_answer();
nlohmann::json error_answer(const std::string& sentence);

// Frame encoding: the 4-byte header for a body of `size` bytes, and a whole frame.
std::array<char, 4> frame_header(std::size_t size);
std::string frame(const std::string& body);
// Reads the length from a 4-byte header.
std::uint32_t frame_length(const unsigned char header[4]);

}  // namespace gpumem::control
