#include "cli/output.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gpumem::cli {
namespace {

template <class Json>
std::string dump(const Json& j, int indent) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
}

void put(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

}  // namespace

std::string json_text(const nlohmann::json& j, int indent) { return dump(j, indent); }
std::string json_text(const nlohmann::ordered_json& j, int indent) { return dump(j, indent); }
void print_json(const nlohmann::json& j, int indent) { put(dump(j, indent)); }
void print_json(const nlohmann::ordered_json& j, int indent) { put(dump(j, indent)); }

bool stdout_failed(std::string& why) {
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int err = errno;
  if (!flush_failed && !std::ferror(stdout)) return false;
  why = std::string("cannot write the output: ") + (err ? std::strerror(err) : "write error");
  return true;
}

std::string grouped(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace gpumem::cli
