// Second pass over a parsed trace: checks that the alloc / free / free_completed events tell a consistent
// story, numbers the blocks, and computes the TraceSummary. Throws TraceError at the first bad event.
#pragma once
#include "gpumem/trace.hpp"

namespace gpumem::trace {

void validate_trace(Trace& trace);

}  // namespace gpumem::trace
