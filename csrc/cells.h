// Declarations of one ISA's cell kernels (lstm.cc, gru.cc, rnn.cc), collected by isa_table.cc.
#pragma once

#include "engine.h"
#include "gemm_kernels.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

template <class T> void lstm_forward(const LstmForwardArgs<T>& args, int threads);
template <class T> void lstm_backward(const LstmBackwardArgs<T>& args, int threads);
template <class T> void gru_forward(const GruForwardArgs<T>& args, int threads);
template <class T> void gru_backward(const GruBackwardArgs<T>& args, int threads);
template <class T> void rnn_forward(const RnnForwardArgs<T>& args, int threads);
template <class T> void rnn_backward(const RnnBackwardArgs<T>& args, int threads);
template <class T> void gemm(const GemmArgs<T>& args, int threads);

// Team size for a job whose phases split `blocks` panels each: never more threads than blocks.
inline int team_size(int threads, int64_t blocks) {
  if (blocks < 1) return 1;
  return int(threads < blocks ? threads : blocks);
}

// Zeroes units [u0, u1) of `groups` groups of `width` columns in rows [first, last) of a
// [rows, groups·width] array: the trace and gradient rows of steps a sequence does not have.
template <class T>
inline void zero_rows(T* a, int64_t first, int64_t last, int64_t groups, int64_t width, int64_t u0,
                      int64_t u1) {
  for (int64_t b = first; b < last; ++b)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t u = u0; u < u1; ++u) a[(b * groups + g) * width + u] = T(0);
}

// Copies units [u0, u1) of rows [first, last) of a [rows, width] state from `from` to `to`: the
// state a sequence that has ended carries to the next step.
template <class T>
inline void carry_rows(T* to, const T* from, int64_t first, int64_t last, int64_t width, int64_t u0,
                       int64_t u1) {
  for (int64_t b = first; b < last; ++b)
    for (int64_t u = u0; u < u1; ++u) to[b * width + u] = from[b * width + u];
}

// Multiply-adds of T steps of a [B, K] x [K, N] product, as flops: the work estimate of run_job.
inline int64_t product_flops(int64_t steps, int64_t batch, int64_t depth, int64_t width) {
  return 2 * steps * batch * depth * width;
}

// A time loop's extra work estimate for a recurrent matrix of depth × width values too large for
// one core's L2 (1 MiB here): it streams from L3 every step, 3 flops per byte (≈ 60 GFLOP/s
// against ≈ 20 GB/s), which dominates at B = 1.
inline int64_t stream_flops(int64_t steps, int64_t depth, int64_t width, int64_t itemsize) {
  const int64_t bytes = depth * width * itemsize;
  return bytes > (int64_t(1) << 20) ? 3 * steps * bytes : 0;
}

// Runs `Job::run(thread, num_threads, sync)` of a job object on the team; `flops` estimates the
// job's work (it sizes the wait for workers that are still waking up, and small jobs may run on
// the caller alone: csrc/team.cc).
template <class Job>
void run_job(Job& job, int threads, int64_t flops) {
  run_team(threads, [](void* context, int t, int n, Sync* sync) {
    static_cast<Job*>(context)->run(t, n, sync);
  }, &job, flops);
}

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn
