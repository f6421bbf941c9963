// The instruction sets compiled in and supported by this CPU (best first), and their tables.
#pragma once

#include <string>
#include <vector>

#include "engine.h"

namespace fusedrnn {

std::vector<std::string> supported_isas();
// The table of `name` ("avx512", "avx2", "portable"), or null when unsupported here.
const EngineTable* find_table(const std::string& name);

}  // namespace fusedrnn
