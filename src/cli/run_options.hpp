// `gpumem run`'s own options, read verbatim from the words after "run" (CLI11 cannot tell our options
// from the program's, and must not guess). Contract: parse_run_options() either returns the options and
// the program's argv, or throws RunUsageError with one sentence, before anything runs: an unknown or
// malformed option, a missing or empty value, --limit and --fraction together, a report path in a
// directory that does not exist. check_run_environment() does the same for the GPUMEM_* variables the
// program would inherit, so a typo fails here and not minutes later inside the program.
#pragma once
#include <string>
#include <vector>

#include "gpumem/errors.hpp"

namespace gpumem::cli {

class RunUsageError : public Error {
 public:
  using Error::Error;
};

struct RunOptions {
  std::string limit, fraction, backend, report;
  bool quiet = false;
  std::vector<std::string> command;  // the program and its arguments
};

// `words`: everything after "run" on the command line. Options end at "--" or at the first word that
// does not start with '-'.
RunOptions parse_run_options(const std::vector<std::string>& words);
// How many of `words` are run's own options and their values (the program's words follow, after any
// "--"): what the command-line parser may read, so that the program's own --help stays the program's.
std::size_t run_option_words(const std::vector<std::string>& words);

// Validates GPUMEM_LIMIT, GPUMEM_FRACTION, GPUMEM_BACKEND, GPUMEM_HOST_CAPACITY, GPUMEM_SIM_CAPACITY,
// GPUMEM_CUDA_PAGE_MIB, the switches (GPUMEM_MAP_AHEAD, GPUMEM_CONTROL, GPUMEM_COOPERATIVE: 1/0, true/false,
// yes/no, on/off), GPUMEM_TRACE (a file that can be written: not a directory, in a directory that exists)
// and GPUMEM_LIBRARY as the environment holds them now (after the options were applied).
void check_run_environment();

}  // namespace gpumem::cli
