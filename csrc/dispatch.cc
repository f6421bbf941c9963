// Run-time choice of the instruction set: the best one this CPU supports, unless the caller
// (fusedrnn.settings, from FUSEDRNN_ISA) asks for another one it supports.
#include "dispatch.h"

#include <stdexcept>
#include <string>

namespace fusedrnn {

namespace portable { const EngineTable* table(); }
#if defined(FUSEDRNN_HAVE_X86)
namespace avx2 { const EngineTable* table(); }
namespace avx512 { const EngineTable* table(); }
#endif

const EngineTable* table_portable() { return portable::table(); }

#if defined(FUSEDRNN_HAVE_X86)
const EngineTable* table_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? avx2::table() : nullptr;
}
const EngineTable* table_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("fma")
             ? avx512::table()
             : nullptr;
}
#else
const EngineTable* table_avx2() { return nullptr; }
const EngineTable* table_avx512() { return nullptr; }
#endif

std::vector<std::string> supported_isas() {
  std::vector<std::string> names;
  if (table_avx512()) names.push_back("avx512");
  if (table_avx2()) names.push_back("avx2");
  names.push_back("portable");
  return names;
}

const EngineTable* find_table(const std::string& name) {
  if (name == "avx512") return table_avx512();
  if (name == "avx2") return table_avx2();
  if (name == "portable") return table_portable();
  return nullptr;
}

}  // namespace fusedrnn
