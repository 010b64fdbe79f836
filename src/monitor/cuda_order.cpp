#include "monitor/cuda_order.hpp"

#include <algorithm>
#include <cctype>

#include "monitor/common.hpp"

namespace gpumem::monitor {

CudaMapping cuda_order(const std::vector<CudaGpu>& gpus, const char* device_order_env, const char* visible_env) {
  CudaMapping m;
  m.order = device_order_env && std::string(device_order_env) == "PCI_BUS_ID" ? "PCI_BUS_ID" : "FASTEST_FIRST";
  std::vector<const CudaGpu*> sorted;
  for (const CudaGpu& g : gpus) sorted.push_back(&g);
  std::stable_sort(sorted.begin(), sorted.end(), [](const CudaGpu* a, const CudaGpu* b) { return a->bus_id < b->bus_id; });
  if (m.order == "FASTEST_FIRST") {
    bool uniform = std::all_of(gpus.begin(), gpus.end(), [&](const CudaGpu& g) {
      return g.name == gpus.front().name && g.capability == gpus.front().capability;
    });
    m.order_estimated = !uniform;
    std::stable_sort(sorted.begin(), sorted.end(), [](const CudaGpu* a, const CudaGpu* b) {
      return a->capability.value_or(std::pair{0, 0}) > b->capability.value_or(std::pair{0, 0});
    });
  }
  for (const CudaGpu* g : sorted) m.enumeration.push_back(g->nvml_index);
  if (!visible_env) {
    m.visible = m.enumeration;
    return m;
  }
  m.visible_env = visible_env;
  std::vector<std::string> entries = split(visible_env, ',');
  for (size_t i = 0; i < entries.size(); ++i) {
    std::string e = trim(entries[i]);
    std::optional<unsigned> match;
    std::string why;
    if (!e.empty() && std::all_of(e.begin(), e.end(), [](unsigned char c) { return std::isdigit(c); })) {
      unsigned long n = e.size() < 10 ? std::stoul(e) : ~0ul;
      if (n < m.enumeration.size()) match = m.enumeration[n];
      else why = "there is no CUDA device " + e;
    } else if (e.rfind("GPU-", 0) == 0) {
      std::vector<unsigned> hits;
      for (const CudaGpu& g : gpus)
        if (g.uuid.rfind(e, 0) == 0) hits.push_back(g.nvml_index);
      if (hits.size() == 1) match = hits.front();
      else why = hits.empty() ? "no GPU has UUID " + e : "UUID prefix " + e + " is ambiguous";
    } else if (e.rfind("MIG-", 0) == 0) {
      why = "MIG instance " + e + " is not listed here (see nvidia-smi -L)";
    } else {
      why = "'" + e + "' is neither an index nor a GPU UUID";
    }
    if (match && std::find(m.visible.begin(), m.visible.end(), *match) != m.visible.end()) {
      why = "'" + e + "' repeats a GPU already listed";
      match.reset();
    }
    if (!match) {
      std::string rest = i + 1 < entries.size() ? " and every entry after it" : "";
      m.notes.push_back("CUDA_VISIBLE_DEVICES entry " + std::to_string(i) + ": " + why + "; CUDA ignores it" + rest + ".");
      break;
    }
    m.visible.push_back(*match);
  }
  return m;
}

}  // namespace gpumem::monitor
