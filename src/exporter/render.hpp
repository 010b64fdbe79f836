// /metrics from one Snapshot: dcgm-exporter's DCGM_FI_* families with its labels (gpu, UUID,
// pci_bus_id, device, modelName, Hostname), per-process and ghost series, gpumem_allocator_* from the
// control channel, and the exporter's own health. Contract: pure function of its arguments; a field
// the snapshot lacks is left out, never rendered as zero.
#pragma once
#include <string>

#include "exporter/exposition.hpp"
#include "exporter/snapshot.hpp"

namespace gpumem::exporter {

// Running totals the exporter keeps across samples and scrapes.
struct ExporterCounters {
  unsigned long long samples = 0;
  unsigned long long nvml_errors = 0;
  unsigned long long control_errors = 0;
  unsigned long long scrapes = 0;
  double last_scrape_seconds = 0;  // the previous scrape: a scrape cannot time its own sending
  double now_unix = 0;             // when this scrape is rendered, for the sample's age
};

std::string render_metrics(const Snapshot& snapshot, const ExporterCounters& counters, Format format);

}  // namespace gpumem::exporter
