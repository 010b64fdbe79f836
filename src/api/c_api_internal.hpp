// For C ABI functions defined outside c_api.cpp (src/report's history entry points).
#pragma once
#include <string>

namespace gpumem::api {
// What gpumem_last_error() returns on this thread from now on.
void set_last_error(const std::string& sentence);
}  // namespace gpumem::api
