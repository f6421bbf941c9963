// The large GEMMs of a pseudo-layer (weight gradients, input gradients) on the engine's team:
// C[M, N] = A[M, K] · B[K, N], A and B read through strides (so Aᵀ and Bᵀ need no copy).
//
// Work split: thread t owns a range of C's rows (whole micro-kernel row blocks; every thread
// reads each chunk of B, packed by the team in shares) when each thread gets at least
// kMinRowsPerThread rows, else the panels [j0, j1) of C's columns (whole NR-column panels; each
// thread packs its own panels and all of A).  Either way each output element is computed by one
// thread in one fixed order whatever the team size and split.  Loops (GotoBLAS order): K in
// chunks; M in blocks of up to kMaxBlockRows rows, packed per thread and reused by every panel
// from L2; each panel's chunk stays in L1 while the row blocks use it.
//
// accurate (float): the sum over K, often T·B ≥ 3000 rows, is formed in float32 over blocks of
// kAccurateRows consecutive k, the (up to 16) block sums of a K chunk are added in float32 and
// the chunk sums in float64 (error ≤ (γ_79 + u)·Σ|a b| instead of γ_K): the issue-7 accuracy at
// the cost of a float32 add per block and a float64 add per chunk and element.  With one chunk
// the block sums are added in C itself.  With several, the float64 sums live between chunks in
// an array in tile order, [panel][row][NR] (the row blocks that follow each other in the loop
// are contiguous: a stream the hardware prefetches, where rows N values apart were not): the
// first chunk writes it (0 + its sum), the ones between add to it, the last adds its sum and
// rounds into C (no zeroing pass before, no conversion pass after, and the first and last
// chunks touch it once each: the same additions, so the same bits).
#include "cells.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

namespace {

constexpr int64_t kMaxBlockRows = 192;
constexpr int64_t kBlockValues = 128 * 1024;  // packed A block ≤ 512 KiB of float: L2-resident
// K chunk of B (all its panels) packed between barriers.  1024 rather than 256 rows: fewer
// barriers and partial-sum passes, 3-12 % faster dx-shaped GEMMs (M = 800-3200, K = 512-4096,
// N = 128-1024) on 1 and 2 threads and 2-7 % faster LSTM training steps at H = 512-1024 (1 thread).
constexpr int64_t kTeamChunkRows = 1024;
constexpr int64_t kAccurateRows = 64;
constexpr int64_t kAccurateChunk = 1024;  // K chunk of the accurate mode (a multiple of the above)
constexpr int64_t kMinRowsPerThread = 96;

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

// The most rows block_rows(m, depth) gives for any m <= M (the size of a packed A block).
inline int64_t max_block_rows(int64_t M, int64_t depth) {
  int64_t most = kBlockValues / (depth > 0 ? depth : 1);
  most = most > kMaxBlockRows ? kMaxBlockRows : most < kMaxRows ? kMaxRows : most;
  const int64_t rows = M < most ? M : most;
  return (rows + kMaxRows - 1) / kMaxRows * kMaxRows;
}

template <class T>
struct GemmJob {
  const GemmArgs<T>& a;
  PackedMatrix<T> chunk;        // B[k0:k1, :] packed, all panels (each thread packs a share)
  T* chunk_data[2];             // by rows: two chunk buffers, used in turn
  const PerThread<T>* a_packs;  // block_rows(M) × chunk rows per thread
  bool accurate;
  bool by_rows;                 // the team splits C's rows (else its panels)
  double* sums;                 // accurate with several K chunks: float64 partial sums,
                                // [panels][M][nr] (tile order)

  // C[m_begin:m_end, panels j0..j1) (+)= A[m_begin:m_end, k0:k1] · (B's chunk, packed in b).
  void multiply_chunk(const PackedMatrix<T>& b, int64_t k0, int64_t k1, int64_t m_begin,
                      int64_t m_end, int64_t j0, int64_t j1, T* a_pack) const {
    constexpr int nr = PackedMatrix<T>::nr;
    const int64_t N = a.N, depth = k1 - k0, chunk_rows = chunk.rows;
    const int64_t m_block = block_rows(m_end - m_begin, chunk_rows);
    const int64_t panel_stride = chunk_rows * nr;  // b's panels (capacity chunk_rows)
    for (int64_t m0 = m_begin; m0 < m_end; m0 += m_block) {
      const int64_t rows = m_end - m0 < m_block ? m_end - m0 : m_block;
      if (a.m_rows)
        pack_rows(a.A, a.a_rs, a.a_cs, rows, k0, k1, a_pack, nullptr, a.m_rows + m0);
      else
        pack_rows(a.A + m0 * a.a_rs, a.a_rs, a.a_cs, rows, k0, k1, a_pack, a.k_rows);
      for (int64_t j = j0; j < j1; j += kPanelsPerBlock) {
        const int panels = int(j1 - j < kPanelsPerBlock ? j1 - j : kPanelsPerBlock);
        const int64_t j_last = j + panels - 1;
        const int64_t width = N - j_last * nr < nr ? N - j_last * nr : nr;  // of the last panel
        const T* panel = b.panel(0, j);
        for (int64_t r0 = 0; r0 < rows; r0 += kMaxRows) {
          const int r = int(rows - r0 < kMaxRows ? rows - r0 : kMaxRows);
          const T* block = a_pack + r0 * depth;
          if (a.m_rows && !consecutive(a.m_rows + m0 + r0, r)) {
            gathered_rows(r, panels, depth, block, panel, panel_stride, a.m_rows + m0 + r0, j, width,
                          k0 > 0);
            continue;
          }
          const int64_t c_row = a.m_rows ? a.m_rows[m0 + r0] : m0 + r0;
          T* const c_block = a.C + c_row * a.ldc + j * nr;  // C's rows of this block, panel j
          if (!accurate) {
            micro_rows<T>(r, panels, 0, depth, block, panel, panel_stride, c_block, a.ldc, width,
                          k0 > 0);
            continue;
          }
          if (!sums && width == nr) {  // one chunk: its float32 sum is the result, formed in C
            micro_rows_blocks<T>(r, panels, depth, kAccurateRows, block, panel, panel_stride,
                                 c_block, a.ldc);
            continue;
          }
          const int64_t tile_stride = panels * nr;
          T tile[kMaxRows * kPanelsPerBlock * nr];
          micro_rows_blocks<T>(r, panels, depth, kAccurateRows, block, panel, panel_stride, tile,
                               tile_stride);
          for (int p = 0; p < panels; ++p) {
            const int64_t columns = p == panels - 1 ? width : nr;
            for (int i = 0; i < r; ++i) {
              T* c = c_block + i * a.ldc + p * nr;
              double* sum = sums ? sums + ((j + p) * a.M + m0 + r0 + i) * nr : nullptr;
              const T* t = tile + i * tile_stride + p * nr;
              // one chunk (a narrower last panel): its float32 sum is the result (0 + x is
              // exact in float64)
              if (!sums) {
                for (int64_t col = 0; col < columns; ++col) c[col] = t[col];
              } else if (k0 == 0) {  // the first of several chunks
                for (int64_t col = 0; col < columns; ++col) sum[col] = 0.0 + double(t[col]);
              } else if (k1 < a.K) {  // a chunk between
                add_to_sums(t, sum, columns);
              } else {                // the last
                for (int64_t col = 0; col < columns; ++col) c[col] = T(sum[col] + double(t[col]));
              }
            }
          }
        }
      }
    }
  }

  // A row block of r rows (r ≤ kMaxRows) whose C rows (`c_rows`) are not consecutive: formed in
  // a tile (the earlier chunks' partial sums copied in, exactly) and copied out to its rows.
  void gathered_rows(int r, int panels, int64_t depth, const T* block, const T* panel,
                     int64_t panel_stride, const int64_t* c_rows, int64_t j, int64_t width,
                     bool accumulate) const {
    constexpr int nr = PackedMatrix<T>::nr;
    const int64_t tile_stride = panels * nr, columns = (panels - 1) * nr + width;
    T tile[kMaxRows * kPanelsPerBlock * nr];
    if (accumulate)
      for (int i = 0; i < r; ++i)
        std::memcpy(tile + i * tile_stride, a.C + c_rows[i] * a.ldc + j * nr, columns * sizeof(T));
    micro_rows<T>(r, panels, 0, depth, block, panel, panel_stride, tile, tile_stride, width,
                  accumulate);
    for (int i = 0; i < r; ++i)
      std::memcpy(a.C + c_rows[i] * a.ldc + j * nr, tile + i * tile_stride, columns * sizeof(T));
  }

  // B's rows [k0, k1) into `b`'s panels [p0, p1).
  void pack_chunk(const PackedMatrix<T>& b, int64_t k0, int64_t p0, int64_t p1) const {
    if (a.k_rows)
      pack_panels(a.B, a.b_rs, a.b_cs, b, p0, p1, static_cast<const T*>(nullptr), nullptr,
                  a.k_rows + k0);
    else
      pack_panels(a.B + k0 * a.b_rs, a.b_rs, a.b_cs, b, p0, p1);
  }

  void run(int t_id, int n_threads, Sync* sync) {
    if (by_rows) return run_by_rows(t_id, n_threads, sync);
    const int64_t M = a.M, K = a.K;
    const int64_t chunk_rows = chunk.rows;
    int64_t j0, j1;
    split_blocks(chunk.panels(), t_id, n_threads, &j0, &j1);
    if (j0 >= j1) return;
    T* a_pack = a_packs->of(t_id);
    for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += chunk_rows) {
      const int64_t k1 = K - k0 < chunk_rows ? K : k0 + chunk_rows;
      PackedMatrix<T> b = chunk;
      b.capacity = chunk_rows;  // fixed panel places: the other threads still read theirs
      b.rows = k1 - k0;
      pack_chunk(b, k0, j0, j1);
      multiply_chunk(b, k0, k1, 0, M, j0, j1, a_pack);
    }
  }

  // Thread t owns rows [m_begin, m_end) of C (whole micro-kernel row blocks) and packs a share
  // of each chunk of B, which every thread then reads: A is packed once in all (the panel split
  // packs all of A in every thread).  Chunk c is packed into buffer c % 2 and the team meets
  // once per chunk: past that barrier every thread has finished chunk c - 1, the previous user
  // of the buffer chunk c + 1 is packed into.
  void run_by_rows(int t_id, int n_threads, Sync* sync) {
    const int64_t M = a.M, K = a.K;
    const int64_t chunk_rows = chunk.rows;
    int64_t u0, u1, p0, p1;
    split_blocks((M + kMaxRows - 1) / kMaxRows, t_id, n_threads, &u0, &u1);
    split_blocks(chunk.panels(), t_id, n_threads, &p0, &p1);
    const int64_t m_begin = u0 * kMaxRows, m_end = u1 * kMaxRows < M ? u1 * kMaxRows : M;
    T* a_pack = a_packs->of(t_id);
    int64_t c = 0;
    for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += chunk_rows, ++c) {
      const int64_t k1 = K - k0 < chunk_rows ? K : k0 + chunk_rows;
      PackedMatrix<T> b = chunk;
      b.data = chunk_data[c % 2];
      b.capacity = chunk_rows;
      b.rows = k1 - k0;
      pack_chunk(b, k0, p0, p1);
      sync->wait();  // the chunk is packed
      if (m_begin < m_end) multiply_chunk(b, k0, k1, m_begin, m_end, 0, b.panels(), a_pack);
    }
  }
};

}  // namespace

template <class T>
void gemm(const GemmArgs<T>& a, int threads) {
  GemmJob<T> job{a, {}, {nullptr, nullptr}, nullptr, false, false, nullptr};
  job.chunk.rows = a.K < kTeamChunkRows ? (a.K > 0 ? a.K : 1) : kTeamChunkRows;
  if (a.accurate && sizeof(T) == sizeof(float)) {
    // whole accurate blocks per chunk, so the block boundaries are at multiples of kAccurateRows;
    // longer chunks: each chunk sweeps the float64 sums once (memory traffic, not FLOPs)
    const int64_t rows = a.K < 1 ? 1 : a.K < kAccurateChunk ? a.K : kAccurateChunk;  // K = 0: one empty chunk
    job.chunk.rows = (rows + kAccurateRows - 1) / kAccurateRows * kAccurateRows;
  }
  job.chunk.columns = a.N;
  // Split C's rows when every thread gets at least kMinRowsPerThread of them (the panel split
  // repacks all of A in each thread, a cost that grows as each thread's panels get fewer).
  const int64_t row_blocks = (a.M + kMaxRows - 1) / kMaxRows;
  job.by_rows = threads > 1 && a.M >= threads * kMinRowsPerThread;
  const int team = team_size(threads, job.by_rows ? row_blocks : job.chunk.panels());
  job.by_rows = job.by_rows && team > 1;
  Buffer<T> chunk(job.chunk.values() * (job.by_rows ? 2 : 1));
  job.chunk.data = job.chunk_data[0] = chunk.data;
  job.chunk_data[1] = chunk.data + (job.by_rows ? job.chunk.values() : 0);
  job.accurate = a.accurate && sizeof(T) == sizeof(float) && a.K > kAccurateRows;
  const bool chunks = job.accurate && a.K > job.chunk.rows;
  Buffer<double> sums(chunks ? size_t(a.M * job.chunk.panels() * PackedMatrix<T>::nr) : 0);
  job.sums = chunks ? sums.data : nullptr;
  // Sized for all of M: the workers that join may be fewer than `team` (then each thread's
  // range of rows is longer than M / team).
  PerThread<T> a_packs(team, size_t(max_block_rows(a.M, job.chunk.rows) * job.chunk.rows));
  job.a_packs = &a_packs;
  run_job(job, team, 2 * a.M * a.N * a.K);
}

template void gemm<float>(const GemmArgs<float>&, int);
template void gemm<double>(const GemmArgs<double>&, int);

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn
