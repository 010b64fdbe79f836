// A program outside the gpumem tree using libgpumem_monitor.so (gpumem/gpumem_monitor.h) through
// find_package(gpumem) (gpumem::monitor) or pkg-config (gpumem_monitor): one sample as JSON. With the NVML
// test double ($GPUMEM_NVML_LIBRARY) the sample holds its GPUs; without NVML the call says why.
#include <gpumem/gpumem_monitor.h>

#include <cstdio>
#include <cstring>

int main() {
  if (gpumem_monitor_abi_version() != GPUMEM_MONITOR_ABI_VERSION) {
    std::fprintf(stderr, "FAIL abi version %d\n", gpumem_monitor_abi_version());
    return 1;
  }
  char* json = nullptr;
  size_t len = 0;
  int status = gpumem_monitor_sample_json(GPUMEM_MONITOR_PROCESSES, &json, &len);
  if (json == nullptr || (status != GPUMEM_MONITOR_OK && status != GPUMEM_MONITOR_NO_DEVICE) ||
      (status == GPUMEM_MONITOR_OK && std::strstr(json, "\"gpus\"") == nullptr)) {
    std::fprintf(stderr, "FAIL sample: status %d: %s\n", status, json ? json : "(null)");
    return 1;
  }
  std::printf("monitor consumer ok: status %d, %zu bytes\n", status, len);
  gpumem_monitor_free(json);
  return 0;
}
