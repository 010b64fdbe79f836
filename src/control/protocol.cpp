// Parsing of control requests: everything a peer sends is untrusted, so each field is checked for type and
// range before use, and any failure becomes one sentence rather than an exception escaping the server.
#include "control/protocol.hpp"

#include "gpumem/limits.hpp"

#include <array>
#include <cmath>

namespace gpumem::control {
namespace {

std::optional<Op> op_from_name(const std::string& name) {
  if (name == "stats") return Op::stats;
  if (name == "clear") return Op::clear;
  if (name == "reset") return Op::reset;
  if (name == "limit") return Op::limit;
  if (name == "stop") return Op::stop;
  if (name == "release") return Op::release;
  if (name == "snapshot") return Op::snapshot;
  return std::nullopt;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::stats: return "stats";
    case Op::clear: return "clear";
    case Op::reset: return "reset";
    case Op::limit: return "limit";
    case Op::stop: return "stop";
    case Op::release: return "release";
    case Op::snapshot: return "snapshot";
  }
  return "stats";
}

// The optional "device" field: absent leaves `device` as it is.
bool parse_device(const nlohmann::json& j, std::optional<int>& device, std::string& error) {
  if (!j.contains("device")) return true;
  const auto& d = j["device"];
  if (!d.is_number_integer() || d.get<std::int64_t>() < 0 || d.get<std::int64_t>() > 1023) {
    error = "field 'device' must be an integer from 0 to 1023";
    return false;
  }
  device = int(d.get<std::int64_t>());
  return true;
}

bool parse_snapshot(const nlohmann::json& j, Request& r, std::string& error) {
  if (!parse_device(j, r.snapshot_device, error)) return false;
  if (!j.contains("format")) return true;
  const auto& f = j["format"];
  if (f.is_string() && f.get<std::string>() == "pickle") r.format = SnapshotFormat::pickle;
  else if (f.is_string() && f.get<std::string>() == "json") r.format = SnapshotFormat::json;
  else {
    error = "field 'format' must be \"pickle\" or \"json\"";
    return false;
  }
  return true;
}

bool parse_limit(const nlohmann::json& j, Request& r, std::string& error) {
  std::optional<int> device;
  if (!parse_device(j, device, error)) return false;
  r.device = device.value_or(0);
  bool has_bytes = j.contains("bytes"), has_fraction = j.contains("fraction");
  if (has_bytes == has_fraction) {
    error = "a limit request needs exactly one of 'bytes' and 'fraction'";
    return false;
  }
  if (has_bytes) {
    const auto& b = j["bytes"];
    if (!b.is_number_unsigned() && !(b.is_number_integer() && b.get<std::int64_t>() >= 0)) {
      error = "field 'bytes' must be a non-negative integer";
      return false;
    }
    r.bytes = b.get<std::uint64_t>();
    if (*r.bytes > kMaxLimitBytes) {
      error = "field 'bytes' must be at most 2^60 (1 EiB)";
      return false;
    }
  } else {
    const auto& f = j["fraction"];
    if (!f.is_number() || !std::isfinite(f.get<double>()) || f.get<double>() <= 0 || f.get<double>() > 1) {
      error = "field 'fraction' must be a number in (0, 1]";
      return false;
    }
    r.fraction = f.get<double>();
  }
  return true;
}

}  // namespace

std::optional<Request> parse_request(std::string_view body, std::string& error) {
  if (body.size() > kMaxRequestBytes) {
    error = "request of " + std::to_string(body.size()) + " bytes is over the " + std::to_string(kMaxRequestBytes) +
            "-byte limit";
    return std::nullopt;
  }
  nlohmann::json j = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    error = "request is not a JSON object";
    return std::nullopt;
  }
  if (!j.contains("v") || !j["v"].is_number_integer() || j["v"].get<std::int64_t>() != kProtocolVersion) {
    error = "request has no protocol version " + std::to_string(kProtocolVersion) + " (field 'v')";
    return std::nullopt;
  }
  if (!j.contains("op") || !j["op"].is_string()) {
    error = "request names no operation (field 'op')";
    return std::nullopt;
  }
  std::optional<Op> op = op_from_name(j["op"].get<std::string>());
  if (!op) {
    error = "unknown operation '" + j["op"].get<std::string>().substr(0, 40) + "'";
    return std::nullopt;
  }
  Request r;
  r.op = *op;
  if (r.op == Op::limit && !parse_limit(j, r, error)) return std::nullopt;
  if (r.op == Op::snapshot && !parse_snapshot(j, r, error)) return std::nullopt;
  if (r.op == Op::release) {
    if (!j.contains("device_key") || !j["device_key"].is_string() || j["device_key"].get<std::string>().empty()) {
      error = "a release request needs a non-empty string 'device_key'";
      return std::nullopt;
    }
    r.device_key = j["device_key"].get<std::string>();
  }
  return r;
}

nlohmann::json request_json(const Request& request) {
  nlohmann::json j = {{"v", kProtocolVersion}, {"op", op_name(request.op)}};
  if (request.op == Op::limit) {
    j["device"] = request.device;
    if (request.bytes) j["bytes"] = *request.bytes;
    if (request.fraction) j["fraction"] = *request.fraction;
  }
  if (request.op == Op::release) j["device_key"] = request.device_key;
  if (request.op == Op::snapshot) {
    j["format"] = snapshot_format_name(request.format);
    if (request.snapshot_device) j["device"] = *request.snapshot_device;
  }
  return j;
}

const char* snapshot_format_name(SnapshotFormat format) noexcept {
  return format == SnapshotFormat::json ? "json" : "pickle";
}

std::string to_wire(const nlohmann::json& message) {
  return message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json ok_answer() { return {{"v", kProtocolVersion}, {"ok", true}}; }

nlohmann::json error_answer(const std::string& sentence) {
  return {{"v", kProtocolVersion}, {"ok", false}, {"error", sentence}};
}

std::array<char, 4> frame_header(std::size_t size) {
  std::uint32_t n = std::uint32_t(size);
  return {char((n >> 24) & 0xff), char((n >> 16) & 0xff), char((n >> 8) & 0xff), char(n & 0xff)};
}

std::string frame(const std::string& body) {
  std::array<char, 4> header = frame_header(body.size());
  return std::string(header.data(), header.size()) + body;
}

std::uint32_t frame_length(const unsigned char header[4]) {
  return (std::uint32_t(header[0]) << 24) | (std::uint32_t(header[1]) << 16) | (std::uint32_t(header[2]) << 8) |
         std::uint32_t(header[3]);
}

}  // namespace gpumem::control
