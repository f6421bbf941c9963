// Row gathers on the team: the batch reordering of variable-length calls (the batch sorted by
// length, and back) and the live rows of their weight-gradient GEMMs
// (fusedrnn/engines/native.py take_rows).  Copies, so any instruction set.
//
// NumPy's take copies row by row on one thread at about half of memcpy's rate (a [50, 32, 256]
// float32 array in 0.27 ms); here each thread copies an equal share of the rows.
#include <cstring>

#include "engine.h"

namespace fusedrnn {
namespace {

// Below this many bytes per thread the copy runs on the caller alone (team start-up and a
// shared cache line cost more than the copy).
constexpr int64_t kMinGatherBytesPerThread = 128 * 1024;

struct GatherJob {
  const char* src;
  int64_t outer_stride, inner_stride;
  const int64_t* index;
  int64_t outer, count, row_bytes;
  char* dst;

  static void run(void* context, int thread, int threads, Sync*) {
    const GatherJob& job = *static_cast<const GatherJob*>(context);
    const int64_t rows = job.outer * job.count;
    const int64_t end = rows * (thread + 1) / threads;
    for (int64_t r = rows * thread / threads; r < end; ++r) {
      const int64_t i = r / job.count, j = r % job.count;
      std::memcpy(job.dst + r * job.row_bytes,
                  job.src + i * job.outer_stride + job.index[j] * job.inner_stride,
                  size_t(job.row_bytes));
    }
  }
};

}  // namespace

void gather_rows(const char* src, int64_t outer, int64_t outer_stride, int64_t inner_stride,
                 const int64_t* index, int64_t count, int64_t row_bytes, char* dst, int threads) {
  GatherJob job{src, outer_stride, inner_stride, index, outer, count, row_bytes, dst};
  const int64_t bytes = outer * count * row_bytes;
  const int64_t most = bytes / kMinGatherBytesPerThread;
  const int team = int(threads < most ? threads : most > 1 ? most : 1);
  // run_team's "flops" sizes its join window, flops / 500 ns: a tenth of the copy's time on one
  // thread (~10 GB/s) is bytes / 100 ns
  run_team(team, &GatherJob::run, &job, 5 * bytes);
}

}  // namespace fusedrnn
