// The driver calls behind CudaBackend::map_run: a run of physical pages mapped one after another at
// consecutive addresses, then access granted once per stretch of them (cuMemSetAccess costs tens of
// microseconds per call whatever its length, cuMemMap about one per page).
//
// Contract: the backend's context is current; `pages` are valid handles, each with its size, none mapped
// at its address yet unless `ready` says so (a page made ahead there: mapped, with access); `ready` is as
// long as `pages`. Either every page ends up mapped with access, or none that this call mapped stays
// mapped and the driver's error is thrown (BackendError): no partial state. Counts every driver call and
// its time into `counts`.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "backends/cuda_driver.hpp"
#include "gpumem/backend.hpp"

namespace gpumem::cuda {

using SizedPage = std::pair<CUmemGenericAllocationHandle, std::size_t>;  // handle, its size

void map_pages_with_access(DevicePtr va, const std::vector<SizedPage>& pages, const std::vector<char>& ready,
                           const std::vector<CUmemAccessDesc>& accesses, BackendCallCounts& counts);

}  // namespace gpumem::cuda
