// Process exit codes of the gpumem CLI; main.cpp prints this table in --help.
#pragma once

namespace gpumem::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,       // the command ran but failed (I/O error, internal error)
  kExitUsage = 2,         // bad flag, bad value, corrupt input file (one that cannot be read at all: 1)
  kExitOutOfMemory = 3,   // the allocator ran out of memory (replay --capacity, run --limit)
  kExitNoDevice = 4,      // NVML or the CUDA driver is not available, or no such GPU
  kExitPartial = 5,       // some targets failed (kill: a process survived or could not be signalled)
  kExitInterrupted = 130  // stopped by SIGINT
};

inline constexpr const char* kExitCodeHelp =
    "Exit codes:\n"
    "  0  success\n"
    "  1  the command failed (I/O or internal error)\n"
    "  2  bad usage or bad input (unknown flag or field, corrupt file; a trace that ends early only with --strict)\n"
    "  3  out of memory (replay --capacity, run --limit, or this machine's RAM)\n"
    "  4  no GPU driver or NVML, or no such GPU\n"
    "  5  partly done (kill: some processes survived or could not be signalled)\n"
    "  130 interrupted (Ctrl-C); 128+N stopped by signal N (143: SIGTERM)\n";

}  // namespace gpumem::cli
