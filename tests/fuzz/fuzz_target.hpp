// What each fuzz target gives besides LLVMFuzzerTestOneInput: seed inputs, for libFuzzer's corpus
// (scripts/fuzz.sh writes them out) and for random_driver.cpp, the short run in `make test` that needs
// no clang. A target declares them once with GPUMEM_FUZZ_SEEDS({...}).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
const std::vector<std::string>& fuzz_seeds();

#define GPUMEM_FUZZ_SEEDS(...)                                   \
  const std::vector<std::string>& fuzz_seeds() {                 \
    static const std::vector<std::string> seeds = __VA_ARGS__;   \
    return seeds;                                                \
  }
