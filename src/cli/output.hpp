// The one way commands print JSON, and the check that stdout took what was printed.
// - print_json(): pretty JSON plus a newline on stdout; bytes that are not UTF-8 (a process named by a
//   hostile user, a file name) become U+FFFD, so the output is always valid JSON and never throws.
// - stdout_failed(): called by main after every command; true when stdout could not be written (a full
//   disk, a closed pipe, /dev/full), with one sentence in `why`.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace gpumem::cli {

std::string json_text(const nlohmann::json& j, int indent = 2);
std::string json_text(const nlohmann::ordered_json& j, int indent = 2);
void print_json(const nlohmann::json& j, int indent = 2);
void print_json(const nlohmann::ordered_json& j, int indent = 2);

bool stdout_failed(std::string& why);

// 1234567 -> "1,234,567": counts in tables and summaries.
std::string grouped(std::uint64_t n);

}  // namespace gpumem::cli
