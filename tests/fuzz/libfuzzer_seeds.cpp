// Under libFuzzer: writes the target's seeds into $GPUMEM_FUZZ_SEED_DIR (its corpus directory, set by
// scripts/fuzz.sh) before libFuzzer reads it, so each run starts from valid inputs.
#include <cstdlib>
#include <fstream>
#include <string>

#include "fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("GPUMEM_FUZZ_SEED_DIR");
  if (!dir) return 0;
  int n = 0;
  for (const auto& seed : fuzz_seeds()) std::ofstream(std::string(dir) + "/seed-" + std::to_string(n++), std::ios::binary) << seed;
  return 0;
}
