// Blocks filled with a byte each, checked later: a data test that the allocator never hands out or
// remaps memory a live block still uses (host backend: the bytes are real).
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

namespace gpumem::testing_fills {

struct Fill {
  void* p;
  std::size_t bytes;
  unsigned char value;
};

inline void fill(const Fill& f) { std::memset(f.p, f.value, f.bytes); }

// Every byte of every fill still holds its value.
inline void expect_intact(const std::vector<Fill>& fills) {
  for (const Fill& f : fills) {
    const auto* bytes = static_cast<const unsigned char*>(f.p);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < f.bytes; ++i) wrong += bytes[i] != f.value;
    EXPECT_EQ(wrong, 0u) << "block of " << f.bytes << " bytes was overwritten";
  }
}

}  // namespace gpumem::testing_fills
