// A stand-in for libFuzzer where clang's is not at hand (the gcc build of `make test`): feeds the target
// its seeds, then random mutations of them (bit flips, byte edits, insertions, cuts, splices, repeats)
// for GPUMEM_FUZZ_SECONDS (default 2) seconds. Prints the random seed so a failure can be replayed with
// GPUMEM_FUZZ_SEED. A bug shows as a crash, an abort or a sanitizer report, as under libFuzzer.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "fuzz/fuzz_target.hpp"

namespace {

std::string mutate(std::string s, const std::vector<std::string>& seeds, std::mt19937_64& rng) {
  auto pick = [&](std::size_t n) { return n ? std::size_t(rng() % n) : 0; };
  static const char* const kTokens[] = {"\n", "\"", "{", "}", ",", ":", "-", "0", "9", ".", "e", "\\u00ff", "--",
                                        "18446744073709551616", "\"op\": \"free\"", "\x1f\x8b"};
  const int edits = 1 + int(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 7) {
      case 0: if (!s.empty()) s[pick(s.size())] ^= char(1 << (rng() % 8)); break;
      case 1: if (!s.empty()) s[pick(s.size())] = char(rng()); break;
      case 2: s.insert(pick(s.size() + 1), 1, char(rng())); break;
      case 3: if (!s.empty()) { const std::size_t at = pick(s.size()); s.erase(at, pick(s.size() - at + 1)); } break;
      case 4: { const std::string& o = seeds[pick(seeds.size())]; const std::size_t at = pick(o.size() + 1);
                s.insert(pick(s.size() + 1), o.substr(at, pick(o.size() - at + 1))); } break;
      case 5: if (!s.empty() && s.size() < 4096) { const std::size_t at = pick(s.size()); s.insert(at, s.substr(at, pick(64))); } break;
      case 6: s.insert(pick(s.size() + 1), kTokens[pick(sizeof kTokens / sizeof *kTokens)]); break;
    }
  }
  return s;
}

void run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
}

}  // namespace

int main() {
  const char* secs = std::getenv("GPUMEM_FUZZ_SECONDS");
  const double seconds = secs ? std::atof(secs) : 2.0;
  const char* seed_env = std::getenv("GPUMEM_FUZZ_SEED");
  const std::uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : std::random_device{}();
  std::printf("random fuzz driver: seed %llu (GPUMEM_FUZZ_SEED), %.1f s\n", static_cast<unsigned long long>(seed), seconds);
  std::fflush(stdout);
  std::mt19937_64 rng(seed);
  const auto& seeds = fuzz_seeds();
  for (const auto& s : seeds) run(s);
  run("");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::size_t runs = 0;
  std::vector<std::string> pool(seeds.begin(), seeds.end());
  while (std::chrono::steady_clock::now() < deadline) {
    std::string input = mutate(pool[rng() % pool.size()], seeds, rng);
    run(input);
    if (rng() % 16 == 0 && pool.size() < 256) pool.push_back(std::move(input));  // keep some for deeper chains
    ++runs;
  }
  std::printf("%zu inputs, no crash\n", runs);
  return 0;
}
