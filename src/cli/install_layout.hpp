// Where `gpumem run` finds the files it needs besides itself. Contract: runtime_file(name) is the first
// of these that exists, else the first (so error messages name the build layout):
// - beside the gpumem binary (the build folder, and the Python wheel, which keeps them together);
// - the installed layout of `cmake --install` / the .deb: BINDIR/<rel>/NAME, where <rel> leads from the
//   binary's folder to the library folder (libgpumem.so) or to share/gpumem/python (the .py files).
//   The relative paths come from CMake (GPUMEM_BIN_TO_LIB, GPUMEM_BIN_TO_PYTHON), so any prefix works.
#pragma once
#include <filesystem>
#include <string>

namespace gpumem::cli {

std::filesystem::path executable_dir();
std::filesystem::path runtime_file(const std::string& name);

}  // namespace gpumem::cli
