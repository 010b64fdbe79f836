// The hot path of trace reading: one event line -> Event, by hand (no allocation, no exceptions).
// Accepts exactly one flat JSON object per line with integer fields t, addr, size, stream and string
// field op (any order; unknown scalar fields are ignored for forward compatibility). Anything else
// (missing or duplicated fields, negative or fractional numbers, unknown ops, trailing text) is rejected
// with a short description of the first problem.
#pragma once
#include <string>
#include <string_view>

#include "gpumem/trace.hpp"

namespace gpumem::trace {

// Returns true and fills `event` (all but line/block) on success; false with `problem` set otherwise.
bool parse_event_line(std::string_view line, Event& event, std::string& problem);

// `text` shortened to at most `limit` characters with non-printable bytes escaped, for messages.
std::string printable_excerpt(std::string_view text, std::size_t limit = 40);

}  // namespace gpumem::trace
