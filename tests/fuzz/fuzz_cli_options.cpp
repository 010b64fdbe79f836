// Fuzz target: the CLI's option parsing. The input is NUL-separated words: `run`'s own option parser
// takes them verbatim, and the whole gpumem app (every command's CLI11 declaration) parses them without
// running anything. Either accepts or refuses with its error type; nothing else may escape.
// (The control channel's request parser gets its own target here once it exists: fuzz_control_request.)
#include <cstdint>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/run_options.hpp"
#include "fuzz/fuzz_target.hpp"

GPUMEM_FUZZ_SEEDS({std::string("--limit\0" "20GiB\0--\0python\0train.py", 30), std::string("--limt=1GiB\0--\0true", 19),
                   std::string("-q\0--report\0--\0true", 19), std::string("replay\0--json\0--capacity\0" "1GiB\0t", 30),
                   std::string("kill\0--signal\0STOP\0" "12", 19), std::string("query\0--query-gpu=name\0--format=csv", 35)})

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> words(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0) words.emplace_back();
    else words.back() += char(data[i]);
  }
  try {
    gpumem::cli::parse_run_options(words);
  } catch (const gpumem::cli::RunUsageError&) {
  } catch (const std::invalid_argument&) {
  }
  auto cli = gpumem::cli::make_cli_app();
  std::vector<std::string> reversed(words.rbegin(), words.rend());  // CLI11 takes arguments last-first
  try {
    cli.app->parse(reversed);
  } catch (const CLI::Error&) {
  }
  return 0;
}
