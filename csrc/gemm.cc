// The large GEMMs of a pseudo-layer (weight gradients, input gradients) on the engine's team:
// C[M, N] = A[M, K] · B[K, N], A and B read through strides (so Aᵀ and Bᵀ need no copy).
//
// Work split: thread t owns the panels [j0, j1) of C's columns (whole NR-column panels), so each
// output element is computed by one thread in one fixed order whatever the team size.  Loops
// (GotoBLAS order): K in chunks, the chunk of B packed once by its owner; M in blocks of
// kBlockRows rows, packed per thread and reused by every panel from L2; each panel's chunk stays
// in L1 while the row blocks use it.
//
// accurate (float): the sum over K, often T·B ≥ 3000 rows, is formed in float32 over blocks of
// kAccurateRows consecutive k, the (up to 16) block sums of a K chunk are added in float32 and
// the chunk sums in float64 (error ≤ (γ_79 + u)·Σ|a b| instead of γ_K): the issue-7 accuracy at
// the cost of a float32 add per block and a float64 add per chunk and element.
#include "cells.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

namespace {

constexpr int64_t kMaxBlockRows = 192;
constexpr int64_t kBlockValues = 128 * 1024;  // packed A block ≤ 512 KiB of float: L2-resident
constexpr int64_t kAccurateRows = 64;
constexpr int64_t kAccurateChunk = 1024;  // K chunk of the accurate mode (a multiple of the above)

// Rows per block of A: M split into equal blocks of at most kMaxBlockRows rows and at most
// kBlockValues / depth (the packed block stays in L2), each a multiple of the micro-kernel's
// rows (so a block of B is not re-read from L2 for a thin last block).
inline int64_t block_rows(int64_t M, int64_t depth) {
  int64_t most = kBlockValues / (depth > 0 ? depth : 1);
  most = most > kMaxBlockRows ? kMaxBlockRows : most < kMaxRows ? kMaxRows : most;
  const int64_t blocks = (M + most - 1) / most;
  const int64_t rows = blocks ? (M + blocks - 1) / blocks : 1;
  return (rows + kMaxRows - 1) / kMaxRows * kMaxRows;
}

// out[c] += double(tile[c]) for c < width (≤ NR), whole vectors where width allows.
template <class T>
inline void add_to_sums(const T* tile, double* out, int64_t width) {
  constexpr int W = Vec<T>::width;
  typedef double Wide __attribute__((vector_size(W * sizeof(double))));
  int64_t c = 0;
  for (; c + W <= width; c += W) {
    Wide sum, add = __builtin_convertvector(load(tile + c), Wide);
    std::memcpy(&sum, out + c, sizeof sum);
    sum += add;
    std::memcpy(out + c, &sum, sizeof sum);
  }
  for (; c < width; ++c) out[c] += double(tile[c]);
}

template <class T>
struct GemmJob {
  const GemmArgs<T>& a;
  PackedMatrix<T> chunk;        // B[k0:k1, :] packed, all panels (each thread packs its own)
  const PerThread<T>* a_packs;  // block_rows(M) × chunk rows per thread
  bool accurate;
  double* sums;                 // accurate with several K chunks: [M, N] float64 partial sums

  void run(int t_id, int n_threads, Sync* sync) {
    constexpr int nr = PackedMatrix<T>::nr;
    const int64_t M = a.M, N = a.N, K = a.K;
    const int64_t chunk_rows = chunk.rows;
    int64_t j0, j1;
    split_blocks(chunk.panels(), t_id, n_threads, &j0, &j1);
    (void)sync;
    if (j0 >= j1) return;
    T* a_pack = a_packs->of(t_id);
    const int64_t n0 = j0 * nr, n1 = j1 * nr < N ? j1 * nr : N;
    if (sums)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = n0; n < n1; ++n) sums[m * N + n] = 0.0;
    for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += chunk_rows) {
      const int64_t k1 = K - k0 < chunk_rows ? K : k0 + chunk_rows, depth = k1 - k0;
      PackedMatrix<T> b = chunk;
      b.capacity = chunk_rows;  // fixed panel places: the other threads still read theirs
      b.rows = depth;
      pack_panels(a.B + k0 * a.b_rs, a.b_rs, a.b_cs, b, j0, j1);
      const int64_t m_block = block_rows(M, chunk_rows);
      for (int64_t m0 = 0; m0 < M; m0 += m_block) {
        const int64_t rows = M - m0 < m_block ? M - m0 : m_block;
        pack_rows(a.A + m0 * a.a_rs, a.a_rs, a.a_cs, rows, k0, k1, a_pack);
        for (int64_t j = j0; j < j1; ++j) {
          const int64_t width = N - j * nr < nr ? N - j * nr : nr;
          const T* panel = b.panel(0, j);
          for (int64_t r0 = 0; r0 < rows; r0 += kMaxRows) {
            const int r = int(rows - r0 < kMaxRows ? rows - r0 : kMaxRows);
            const T* block = a_pack + r0 * depth;
            if (!accurate) {
              micro_rows<T>(r, 1, 0, depth, block, panel, chunk_rows * nr,
                            a.C + (m0 + r0) * a.ldc + j * nr, a.ldc, width, k0 > 0);
              continue;
            }
            T tile[kMaxRows * nr];
            micro_rows_blocks<T>(r, depth, kAccurateRows, block, panel, tile);
            for (int i = 0; i < r; ++i) {
              if (sums) {  // several chunks
                add_to_sums(tile + i * nr, sums + (m0 + r0 + i) * N + j * nr, width);
              } else {     // one chunk: its float32 sum is the result (0 + x is exact in float64)
                T* c = a.C + (m0 + r0 + i) * a.ldc + j * nr;
                for (int64_t col = 0; col < width; ++col) c[col] = tile[i * nr + col];
              }
            }
          }
        }
      }
    }
    if (sums)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = n0; n < n1; ++n) a.C[m * a.ldc + n] = T(sums[m * N + n]);
  }
};

}  // namespace

template <class T>
void gemm(const GemmArgs<T>& a, int threads) {
  GemmJob<T> job{a, {}, nullptr, false, nullptr};
  job.chunk.rows = a.K < kKChunk ? (a.K > 0 ? a.K : 1) : kKChunk;
  if (a.accurate && sizeof(T) == sizeof(float)) {
    // whole accurate blocks per chunk, so the block boundaries are at multiples of kAccurateRows;
    // longer chunks: each chunk sweeps the float64 sums once (memory traffic, not FLOPs)
    const int64_t rows = a.K < 1 ? 1 : a.K < kAccurateChunk ? a.K : kAccurateChunk;  // K = 0: one empty chunk
    job.chunk.rows = (rows + kAccurateRows - 1) / kAccurateRows * kAccurateRows;
  }
  job.chunk.columns = a.N;
  Buffer<T> chunk(job.chunk.values());
  job.chunk.data = chunk.data;
  job.accurate = a.accurate && sizeof(T) == sizeof(float) && a.K > kAccurateRows;
  const bool chunks = job.accurate && a.K > job.chunk.rows;
  Buffer<double> sums(chunks ? size_t(a.M * a.N) : 0);
  job.sums = chunks ? sums.data : nullptr;
  const int team = team_size(threads, job.chunk.panels());
  PerThread<T> a_packs(team, size_t(block_rows(a.M, job.chunk.rows) * job.chunk.rows));
  job.a_packs = &a_packs;
  run_job(job, team, 2 * a.M * a.N * a.K);
}

template void gemm<float>(const GemmArgs<float>&, int);
template void gemm<double>(const GemmArgs<double>&, int);

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn
