// The sim and host backends join the conformance suite (CUDA backends add their own file).
#include "backends/conformance.hpp"
#include "gpumem/host_backend.hpp"
#include "gpumem/sim_backend.hpp"

namespace {

using gpumem::Backend;
using gpumem::HostBackend;
using gpumem::SimBackend;
using gpumem::StreamId;
using gpumem::conformance::BackendConformance;
using gpumem::conformance::BackendParams;
using gpumem::conformance::BackendUnderTest;

BackendUnderTest sim(bool virtual_memory) {
  BackendUnderTest b;
  b.name = virtual_memory ? "sim" : "sim_plain";
  b.factory = [virtual_memory](const BackendParams& p) {
    gpumem::SimBackendOptions o;
    o.capacity = p.capacity;
    o.granularity = p.granularity;
    o.manual_events = p.manual_events;
    o.virtual_memory = virtual_memory;
    return std::make_shared<SimBackend>(o);
  };
  b.complete_stream = [](Backend& be, StreamId s) { static_cast<SimBackend&>(be).complete_stream(s); };
  b.live_chunks = [](const Backend& be) { return static_cast<const SimBackend&>(be).live_chunks(); };
  b.live_mappings = [](const Backend& be) { return static_cast<const SimBackend&>(be).live_mappings(); };
  return b;
}

BackendUnderTest host() {
  BackendUnderTest b;
  b.name = "host";
  b.factory = [](const BackendParams& p) {
    gpumem::HostBackendOptions o;
    o.capacity = p.capacity;
    o.granularity = p.granularity;
    o.manual_events = p.manual_events;
    return std::make_shared<HostBackend>(o);
  };
  b.has_real_memory = true;
  b.complete_stream = [](Backend& be, StreamId s) { static_cast<HostBackend&>(be).complete_stream(s); };
  b.live_chunks = [](const Backend& be) { return static_cast<const HostBackend&>(be).live_chunks(); };
  b.live_mappings = [](const Backend& be) { return static_cast<const HostBackend&>(be).live_mappings(); };
  return b;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Sim, BackendConformance, ::testing::Values(sim(true), sim(false)),
                         gpumem::conformance::ConformanceName{});
INSTANTIATE_TEST_SUITE_P(Host, BackendConformance, ::testing::Values(host()), gpumem::conformance::ConformanceName{});
