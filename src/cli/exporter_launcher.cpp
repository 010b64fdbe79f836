// `gpumem exporter` in the gpumem binary: the exporter itself is the separate gpumem-exporter binary
// (cmd_exporter.cpp), because it needs Debian's cpp-httplib, a shared library the other commands must not
// depend on (gpumem has to start on machines that lack it, the GPU machines included); the .deb ships it as
// its own package, gpumem-exporter. This command replaces the process with gpumem-exporter from gpumem's
// own directory, with the same arguments, so signals, exit codes and --help are the exporter's own. Before
// that it checks that the exporter is there and that cpp-httplib's library loads, and says which is missing
// in one sentence instead of execv's or the dynamic loader's error.
#include <unistd.h>
#ifdef GPUMEM_HTTPLIB_SONAME
#include <dlfcn.h>
#endif

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"

namespace gpumem::cli {
namespace {

std::string exporter_path() {
  std::vector<char> buf(4096);
  ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return "gpumem-exporter";
  std::string self(buf.data(), std::size_t(n));
  return self.substr(0, self.rfind('/') + 1) + "gpumem-exporter";
}

int exec_exporter() {
  const std::vector<std::string>& raw = raw_arguments();
  std::size_t at = 1;
  while (at < raw.size() && raw[at] != "exporter") ++at;
  std::string path = exporter_path();
  std::vector<std::string> args{"gpumem", "exporter"};  // argv[0]: what --help and errors name
  for (std::size_t i = at + 1; i < raw.size(); ++i) args.push_back(raw[i]);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (::access(path.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "gpumem exporter: %s is not installed: it comes with the gpumem-exporter .deb (beside the gpumem "
                 ".deb), or from a source build with cpp-httplib (libcpp-httplib-dev)\n",
                 path.c_str());
    return kExitFailure;
  }
#ifdef GPUMEM_HTTPLIB_SONAME
  if (void* httplib = ::dlopen(GPUMEM_HTTPLIB_SONAME, RTLD_LAZY | RTLD_LOCAL)) {
    ::dlclose(httplib);
  } else {
    std::fprintf(stderr,
                 "gpumem exporter: gpumem-exporter needs cpp-httplib's shared library " GPUMEM_HTTPLIB_SONAME
                 ", which this system lacks (apt install " GPUMEM_HTTPLIB_PACKAGE " where the distribution has it; "
                 "elsewhere build gpumem from source against its libcpp-httplib-dev)\n");
    return kExitFailure;
  }
#endif
  std::fflush(stdout);
  ::execv(path.c_str(), argv.data());
  std::fprintf(stderr,
               "gpumem exporter: cannot start %s: %s\n",
               path.c_str(), std::strerror(errno));
  return kExitFailure;
}

}  // namespace

GPUMEM_REGISTER_COMMAND(exporter_launcher, "exporter",
                        "Prometheus /metrics: dcgm-exporter's GPU metrics plus processes, ghosts and gpumem "
                        "allocators (runs gpumem-exporter)",
                        60, [](CLI::App& sub) -> CommandRunner {
                          sub.set_help_flag();  // --help goes to the exporter itself
                          sub.allow_extras();
                          sub.prefix_command();
                          return [] { return exec_exporter(); };
                        });

}  // namespace gpumem::cli
