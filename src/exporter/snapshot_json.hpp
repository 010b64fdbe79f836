// One Snapshot as JSON (`gpumem exporter --once --json`): the same numbers /metrics serves, in bytes
// and plain units, for scripts that would rather not parse the Prometheus text format.
#pragma once
#include <nlohmann/json.hpp>

#include "exporter/snapshot.hpp"

namespace gpumem::exporter {

nlohmann::ordered_json snapshot_json(const Snapshot& snapshot);

}  // namespace gpumem::exporter
