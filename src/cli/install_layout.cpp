#include "cli/install_layout.hpp"

#include <system_error>

#ifndef GPUMEM_BIN_TO_LIB
#define GPUMEM_BIN_TO_LIB "../lib"
#endif
#ifndef GPUMEM_BIN_TO_PYTHON
#define GPUMEM_BIN_TO_PYTHON "../share/gpumem/python"
#endif

namespace gpumem::cli {

namespace fs = std::filesystem;

fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() : exe.parent_path();
}

fs::path runtime_file(const std::string& name) {
  const fs::path bin = executable_dir();
  const bool library = name.ends_with(".so");
  const fs::path candidates[] = {bin / name, bin / (library ? GPUMEM_BIN_TO_LIB : GPUMEM_BIN_TO_PYTHON) / name};
  for (const fs::path& p : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.lexically_normal();
  }
  return candidates[0];
}

}  // namespace gpumem::cli
