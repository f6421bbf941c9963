// The GEMM micro-kernels and the per-step recurrent GEMM: C[M, G·N] = A[M, K] · B, B packed
// (pack.h: panels of NR = 2 vectors columns), A packed per call into row blocks (pack_rows).
// Register-blocked micro-kernel: MR rows × NR columns of accumulators, one FMA per
// (row, vector, k), k in increasing order from zero; K is cut into chunks of k_chunk<T> so that
// a row block's packed A stays in L1 while the panel streams from L2 (between chunks the partial
// sums go through C exactly: storing and reloading a value does not round it).  Each output
// element is therefore computed by the same sequence of operations whichever thread or panel
// range computes it, and whatever the chunking: results are independent of the thread count.
#pragma once

#include <cstring>

#include "engine.h"
#include "pack.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

#if FUSEDRNN_VECTOR_BYTES >= 32
constexpr int kMaxRows = 6;  // 12 accumulators + 2 panel vectors + 1 broadcast ≤ 16 registers
#else
constexpr int kMaxRows = 4;
#endif
// Panels per kernel call for a block of 3 or more rows: two where 32 vector registers hold 24
// accumulators (AVX-512: half the broadcasts of A per FMA; step GEMMs [16-64, 256-512] x
// [256-512, 4 · (256-512)] 4-9 % faster on an Intel Xeon with two 512-bit FMA units, the same
// bits), else one.
#if FUSEDRNN_VECTOR_BYTES >= 64
constexpr int kPanelsPerBlock = 2;
#else
constexpr int kPanelsPerBlock = 1;
#endif

// 4 KiB of each A row per K chunk (1024 floats, 512 doubles): a 6-row block of packed A (24 KiB)
// stays in L1 and the panel streams from L2, which keeps up with the kernel (two vector loads
// per 12 FMAs).  Shorter chunks reload the partial sums more often: chunks of 256 made the
// float32 forward loops at K = 512-1024 4-11 % slower than 1024 (lstm-H512/H1024-B16/B64,
// gru-H1024-B64, rnn_tanh-H1024-B16, 1 thread, docs/performance.md); 128: 7-11 % slower still;
// unbounded chunks measured the same as 1024 up to K = 4096.
template <class T>
constexpr int64_t k_chunk = int64_t(4096 / sizeof(T));
// Panel rows fetched ahead of use: the recurrent matrix (up to 16 MiB) streams from L3 each step.
constexpr int64_t kPrefetchAhead = 16;
// A packed matrix larger than this does not stay in a core's L2 between passes: gemm_packed
// fetches its next chunk into L2 while it computes the current one.
constexpr size_t kL2ResidentBytes = size_t(1) << 20;

// Rows [0, MR) of the columns of NP consecutive panels (+)= A[:, k0:k1] · panels[k0:k1];
// `a`: the row block packed k-major (a[k · MR + r] = A[r, k], pack_rows); `accumulate`: add
// to C.  Panel p starts `panel_stride` values after panel p-1 and its columns start at
// C + p·NR; only the last one may be narrower than NR (`last_width`).  NP > 1 gives a few rows
// enough independent accumulators to hide the FMA latency; each element's sum is the same
// sequence of FMAs whatever MR and NP.  [ahead, ahead_end): bytes to fetch into L2 meanwhile,
// a line per k (two when the range holds more lines than the chunk has k), and as many at
// `ahead_stride` bytes further for each further panel (0: none; the next call's panels).
// Never inlined: inside a large caller GCC may keep the accumulators in memory.
template <class T, int MR, int NP>
__attribute__((noinline)) void micro_kernel(int64_t k0, int64_t k1, const T* a, const T* panel,
                         int64_t panel_stride, T* C, int64_t ldc, int64_t last_width,
                         bool accumulate, const char* ahead, const char* ahead_end,
                         int64_t ahead_stride) {
  constexpr int W = Vec<T>::width;
  constexpr int nr = 2 * W;
  V<T> acc[MR][2 * NP];
  for (int r = 0; r < MR; ++r) {
    for (int p = 0; p < NP; ++p) {
      const int64_t width = p == NP - 1 ? last_width : nr;
      T* c = C + r * ldc + p * nr;
      if (!accumulate) {
        acc[r][2 * p] = acc[r][2 * p + 1] = splat<T>(T(0));
      } else if (width == nr) {
        acc[r][2 * p] = load(c);
        acc[r][2 * p + 1] = load(c + W);
      } else {
        T buffer[nr] = {};
        for (int64_t i = 0; i < width; ++i) buffer[i] = c[i];
        acc[r][2 * p] = load(buffer);
        acc[r][2 * p + 1] = load(buffer + W);
      }
    }
  }
  const T* ak = a + k0 * MR;
  const T* bk = panel + k0 * nr;
  const bool two_lines = ahead_end - ahead > 64 * (k1 - k0);
  // Unrolled: one k was 12 FMAs among ~26 instructions, and the loop's own (counter, pointers,
  // branch) left the 6-row kernel short of two FMAs a cycle on Zen 3; four k per pass run the
  // same operations in the same order (same bits), 5-15 % faster step GEMMs (docs/performance.md).
#pragma GCC unroll 4
  for (int64_t k = k0; k < k1; ++k, ak += MR, bk += nr) {
    if (ahead < ahead_end) {
      for (int p = 0; p < (ahead_stride ? NP : 1); ++p) {
        __builtin_prefetch(ahead + p * ahead_stride, 0, 2);
        if (two_lines) __builtin_prefetch(ahead + p * ahead_stride + 64, 0, 2);
      }
      ahead += two_lines ? 128 : 64;
    }
    V<T> b[2 * NP];
    for (int p = 0; p < NP; ++p) {
      __builtin_prefetch(bk + p * panel_stride + kPrefetchAhead * nr);
      b[2 * p] = load(bk + p * panel_stride);
      b[2 * p + 1] = load(bk + p * panel_stride + W);
    }
    for (int r = 0; r < MR; ++r) {
      const V<T> av = broadcast(ak + r);
      for (int q = 0; q < 2 * NP; ++q) acc[r][q] = fmadd(av, b[q], acc[r][q]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int p = 0; p < NP; ++p) {
      const int64_t width = p == NP - 1 ? last_width : nr;
      T* c = C + r * ldc + p * nr;
      if (width == nr) {
        store(c, acc[r][2 * p]);
        store(c + W, acc[r][2 * p + 1]);
      } else {
        T buffer[nr];
        store(buffer, acc[r][2 * p]);
        store(buffer + W, acc[r][2 * p + 1]);
        for (int64_t i = 0; i < width; ++i) c[i] = buffer[i];
      }
    }
  }
}

// The accurate weight-gradient kernel: rows [0, MR) of NP consecutive panels (`panel_stride`
// values apart), k in [0, depth) cut into blocks of `block` consecutive k; each block's sum is
// formed in the registers from zero (one FMA chain per element, as micro_kernel) and added to
// `tile` ([MR, NP·NR], rows `tile_stride` apart: a tile of the caller's, or C itself) in float32,
// the first block stored.  Staying in one call keeps the FMA pipeline busy across the block
// boundaries (a call per block drained it: ~6 % of the GEMM).
template <class T, int MR, int NP>
__attribute__((noinline)) void micro_kernel_blocks(int64_t depth, int64_t block, const T* a,
                                                   const T* panel, int64_t panel_stride, T* tile,
                                                   int64_t tile_stride) {
  constexpr int W = Vec<T>::width;
  constexpr int nr = 2 * W;
  for (int64_t k0 = 0; k0 < depth || k0 == 0; k0 += block) {
    const int64_t k1 = depth - k0 < block ? depth : k0 + block;
    V<T> acc[MR][2 * NP];
    for (int r = 0; r < MR; ++r)
      for (int q = 0; q < 2 * NP; ++q) acc[r][q] = splat<T>(T(0));
    const T* ak = a + k0 * MR;
    const T* bk = panel + k0 * nr;
#pragma GCC unroll 4  // as micro_kernel's loop
    for (int64_t k = k0; k < k1; ++k, ak += MR, bk += nr) {
      V<T> b[2 * NP];
      for (int p = 0; p < NP; ++p) {
        __builtin_prefetch(bk + p * panel_stride + kPrefetchAhead * nr);
        b[2 * p] = load(bk + p * panel_stride);
        b[2 * p + 1] = load(bk + p * panel_stride + W);
      }
      for (int r = 0; r < MR; ++r) {
        const V<T> av = broadcast(ak + r);
        for (int q = 0; q < 2 * NP; ++q) acc[r][q] = fmadd(av, b[q], acc[r][q]);
      }
    }
    for (int r = 0; r < MR; ++r) {
      T* t = tile + r * tile_stride;
      for (int q = 0; q < 2 * NP; ++q) {
        if (k0 == 0) {
          store(t + q * W, acc[r][q]);
        } else {
          store(t + q * W, load(t + q * W) + acc[r][q]);
        }
      }
    }
  }
}

// Panels per kernel call for a block of `rows` rows (1 or 2 rows: 8 to 12 accumulators).
inline int panels_per_call(int rows) { return rows == 1 ? 4 : rows == 2 ? 3 : kPanelsPerBlock; }

// A compile-time int passed as a value (not std::integral_constant: simd.h).
template <int N>
struct Constant {
  static constexpr int value = N;
};

// kernel(Constant<MR>, Constant<NP>) for a block of `rows` rows and `panels` panels: one kernel
// instantiation per pair the products use (panels_per_call, or fewer at the end of a range).
template <class Kernel>
inline void for_block(int rows, int panels, Kernel&& kernel) {
#define FUSEDRNN_BLOCK(MR, NP) return kernel(Constant<MR>{}, Constant<NP>{})
  if (rows == 1) {
    switch (panels) {
      case 4: FUSEDRNN_BLOCK(1, 4);
      case 3: FUSEDRNN_BLOCK(1, 3);
      case 2: FUSEDRNN_BLOCK(1, 2);
      default: FUSEDRNN_BLOCK(1, 1);
    }
  }
  if (rows == 2) {
    switch (panels) {
      case 3: FUSEDRNN_BLOCK(2, 3);
      case 2: FUSEDRNN_BLOCK(2, 2);
      default: FUSEDRNN_BLOCK(2, 1);
    }
  }
#if FUSEDRNN_VECTOR_BYTES >= 64
  if (panels == 2) {
    switch (rows) {
      case 3: FUSEDRNN_BLOCK(3, 2);
      case 4: FUSEDRNN_BLOCK(4, 2);
      case 5: FUSEDRNN_BLOCK(5, 2);
      case 6: FUSEDRNN_BLOCK(6, 2);
      default: return;
    }
  }
#endif
  switch (rows) {
    case 3: FUSEDRNN_BLOCK(3, 1);
    case 4: FUSEDRNN_BLOCK(4, 1);
#if FUSEDRNN_VECTOR_BYTES >= 32
    case 5: FUSEDRNN_BLOCK(5, 1);
    case 6: FUSEDRNN_BLOCK(6, 1);
#endif
    default: return;
  }
#undef FUSEDRNN_BLOCK
}

template <class T>
inline void micro_rows_blocks(int rows, int panels, int64_t depth, int64_t block, const T* a,
                              const T* panel, int64_t panel_stride, T* tile, int64_t tile_stride) {
  for_block(rows, panels, [&](auto mr, auto np) {
    micro_kernel_blocks<T, decltype(mr)::value, decltype(np)::value>(depth, block, a, panel,
                                                                      panel_stride, tile, tile_stride);
  });
}

template <class T>
inline void micro_rows(int rows, int panels, int64_t k0, int64_t k1, const T* a, const T* panel,
                       int64_t panel_stride, T* C, int64_t ldc, int64_t last_width,
                       bool accumulate, const char* ahead = nullptr, const char* ahead_end = nullptr,
                       int64_t ahead_stride = 0) {
  for_block(rows, panels, [&](auto mr, auto np) {
    micro_kernel<T, decltype(mr)::value, decltype(np)::value>(
        k0, k1, a, panel, panel_stride, C, ldc, last_width, accumulate, ahead, ahead_end,
        ahead_stride);
  });
}

// Packs rows [0, M) and columns [k0, k1) of A (element (m, k) at A[m · row_stride +
// k · col_stride]) into row blocks of kMaxRows rows, each k-major: block b (rows
// b·kMaxRows ..., `rows` of them, fewer in the last block) holds dst[b·kMaxRows·K' + k'·rows + r]
// with K' = k1 - k0 (M · K' values in all).  A block's micro-kernel reads it as a[k'·MR + r].
// k per tile of a transposed A: the tile's runs of A stay in L1 while its blocks are written,
// and 8 rows fill at most the 8 ways of an L1 set even when A's row stride is a multiple of 4 KiB
// (16 measured the same on Zen 3).
constexpr int64_t kPackRowsTile = 8;

// Whether rows[0..count) of a strictly increasing list are consecutive (rows[i] = rows[0] + i):
// a gathered block that lies in one piece.
inline bool consecutive(const int64_t* rows, int64_t count) {
  return count < 1 || rows[count - 1] - rows[0] == count - 1;
}
#if FUSEDRNN_VECTOR_BYTES >= 32
// A full block of kMaxRows = 6 contiguous float rows, k in [0, depth / 8 · 8): 8 × 8 register
// transposes (rows 6 and 7 zero), the first 6 values of each transposed row stored.  Returns
// the k it stopped at.
inline int64_t pack_row_tiles(const float* src, int64_t row_stride, int64_t depth, float* block) {
  static_assert(kMaxRows == 6, "the tiles hold 6 rows");
  const int64_t tiled = depth / 8 * 8;
  for (int64_t k0 = 0; k0 < tiled; k0 += 8) {
    __m256 t[8];
    for (int r = 0; r < 6; ++r) t[r] = _mm256_loadu_ps(src + r * row_stride + k0);
    t[6] = t[7] = _mm256_setzero_ps();
    transpose_tile(t);
    for (int j = 0; j < 8; ++j) {
      float* out = block + (k0 + j) * 6;
      _mm_storeu_ps(out, _mm256_castps256_ps128(t[j]));
      _mm_storel_pi(reinterpret_cast<__m64*>(out + 4), _mm256_extractf128_ps(t[j], 1));
    }
  }
  return tiled;
}

// The same for 6 double rows, k in [0, depth / 4 · 4): rows 0-3 as a 4 × 4 register transpose,
// rows 4-5 as 2 × 4 (the float64 blocks went value by value: 8 % of an lstm-H256-B16-T50-f64
// training step).
inline int64_t pack_row_tiles(const double* src, int64_t row_stride, int64_t depth, double* block) {
  static_assert(kMaxRows == 6, "the tiles hold 6 rows");
  const int64_t tiled = depth / 4 * 4;
  for (int64_t k0 = 0; k0 < tiled; k0 += 4) {
    __m256d r[6];
    for (int i = 0; i < 6; ++i) r[i] = _mm256_loadu_pd(src + i * row_stride + k0);
    const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
    const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
    const __m256d u0 = _mm256_unpacklo_pd(r[4], r[5]), u1 = _mm256_unpackhi_pd(r[4], r[5]);
    // k0 + j: rows 0-3 in low[j], rows 4-5 in high[j]
    const __m256d low[4] = {
        _mm256_permute2f128_pd(t0, t2, 0x20), _mm256_permute2f128_pd(t1, t3, 0x20),
        _mm256_permute2f128_pd(t0, t2, 0x31), _mm256_permute2f128_pd(t1, t3, 0x31)};
    const __m128d high[4] = {_mm256_castpd256_pd128(u0), _mm256_castpd256_pd128(u1),
                             _mm256_extractf128_pd(u0, 1), _mm256_extractf128_pd(u1, 1)};
    for (int j = 0; j < 4; ++j) {
      double* out = block + (k0 + j) * 6;
      _mm256_storeu_pd(out, low[j]);
      _mm_storeu_pd(out + 4, high[j]);
    }
  }
  return tiled;
}
#endif

// `k_rows` (only for a transposed A, row_stride 1): A's column k is at A + k_rows[k] ·
// col_stride (a gather of the rows of the matrix A is the transpose of); `m_rows` (only for
// contiguous rows, col_stride 1): A's row m is at A + m_rows[m] · row_stride.  Either: the same
// packed values as packing the gathered matrix.
template <class T>
void pack_rows(const T* A, int64_t row_stride, int64_t col_stride, int64_t M, int64_t k0,
               int64_t k1, T* dst, const int64_t* k_rows = nullptr,
               const int64_t* m_rows = nullptr) {
  const int64_t depth = k1 - k0;
  if (k_rows || (row_stride == 1 && col_stride != 1)) {
    // A's columns are contiguous (a transposed view): for each k, the M values of the blocks
    // are one contiguous run of A, copied a fixed-size block at a time.  k in tiles of
    // kPackRowsTile, block by block within a tile, each block's part written as one sequential
    // stream.  (Writing every block at each k kept M / 6 store streams kMaxRows · depth values
    // apart: at depth = 1024 (24 KiB apart) all of them fall into one L1 set, and packing a
    // [128, 1024] block took 3.3x as long on Zen 3; docs/performance.md.)
    const int64_t full = M / kMaxRows * kMaxRows, rest = M - full;
    for (int64_t t0 = 0; t0 < depth; t0 += kPackRowsTile) {
      const int64_t t1 = depth - t0 < kPackRowsTile ? depth : t0 + kPackRowsTile;
      // A's column k0 + k (a row of the matrix A transposes)
      const auto column = [&](int64_t k) {
        return A + (k_rows ? k_rows[k0 + k] : k0 + k) * col_stride;
      };
      for (int64_t m0 = 0; m0 < full; m0 += kMaxRows) {
        T* block = dst + m0 * depth;
        for (int64_t k = t0; k < t1; ++k)
          std::memcpy(block + k * kMaxRows, column(k) + m0, kMaxRows * sizeof(T));
      }
      for (int64_t k = t0; k < t1; ++k)
        for (int64_t r = 0; r < rest; ++r) dst[full * depth + k * rest + r] = column(k)[full + r];
    }
    return;
  }
  for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
    const int64_t rows = M - m0 < kMaxRows ? M - m0 : kMaxRows;
    T* block = dst + m0 * depth;
    if (m_rows && !consecutive(m_rows + m0, rows)) {  // rows gathered one at a time
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = A + m_rows[m0 + r] * row_stride + k0;
        for (int64_t k = 0; k < depth; ++k) block[k * rows + r] = row[k];
      }
      continue;
    }
    const T* src = A + (m_rows ? m_rows[m0] : m0) * row_stride + k0 * col_stride;
    if (col_stride == 1) {
      int64_t k_done = 0;
#if FUSEDRNN_VECTOR_BYTES >= 32
      if (rows == kMaxRows) k_done = pack_row_tiles(src, row_stride, depth, block);
#endif
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = k_done; k < depth; ++k) block[k * rows + r] = src[r * row_stride + k];
    } else {
      for (int64_t k = 0; k < depth; ++k)
        for (int64_t r = 0; r < rows; ++r) block[k * rows + r] = src[r * row_stride + k * col_stride];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The unpacked product of one-row steps.  At B = 1 a step's GEMM is a matrix-vector product that
// reads every value of R once: packing R (a transposing copy of the whole matrix per call) costs
// as much as several steps, so the forward loops read R where it lies when each of its columns
// is contiguous (element (k, n) at src[n · col_stride + k]: the cuDNN layout's R).

constexpr int kDotColumns = 8;  // columns per pass: 8 independent FMA chains hide the latency

// dot_columns' vectors: at most 32 bytes.  With AVX-512's 64-byte vectors the B = 1 forward
// loops ran 11-26 % slower (LSTM H = 256-1024, Zen 4, 1 thread: NumPy's buffers start 16 bytes
// past a cache line, so every 64-byte load of a column splits two lines), and
// the 32-byte lanes give AVX-512 the AVX2 copy's bits.
constexpr int kDotBytes = kVectorBytes < 32 ? kVectorBytes : 32;
template <class T> using DV = V<T, kDotBytes>;

// sums[j] = the sum of v[j]'s lanes for j < 8, each in one fixed order (adjacent lanes
// pairwise: ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) for 8 lanes), so a column's
// value does not depend on which columns share its pass.
#if FUSEDRNN_VECTOR_BYTES >= 32
inline void column_sums(const DV<float>* v, float* sums) {
  const auto m = [&](int j) { return (__m256)v[j]; };
  const __m256 a = _mm256_hadd_ps(m(0), m(1)), b = _mm256_hadd_ps(m(2), m(3));
  const __m256 c = _mm256_hadd_ps(m(4), m(5)), d = _mm256_hadd_ps(m(6), m(7));
  const __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
  _mm256_storeu_ps(sums, _mm256_permute2f128_ps(ab, cd, 0x20) + _mm256_permute2f128_ps(ab, cd, 0x31));
}
inline void column_sums(const DV<double>* v, double* sums) {
  for (int half = 0; half < 2; ++half) {
    const auto m = [&](int j) { return (__m256d)v[4 * half + j]; };
    const __m256d a = _mm256_hadd_pd(m(0), m(1)), b = _mm256_hadd_pd(m(2), m(3));
    _mm256_storeu_pd(sums + 4 * half,
                     _mm256_permute2f128_pd(a, b, 0x20) + _mm256_permute2f128_pd(a, b, 0x31));
  }
}
#else
template <class T>
inline void column_sums(const DV<T>* v, T* sums) {
  constexpr int W = Vec<T, kDotBytes>::width;
  for (int j = 0; j < kDotColumns; ++j) {
    T lanes[W];
    std::memcpy(lanes, &v[j], sizeof lanes);
    for (int half = W / 2; half >= 1; half /= 2)
      for (int i = 0; i < half; ++i) lanes[i] += lanes[i + half];
    sums[j] = lanes[0];
  }
}
#endif

// out[m · ldo + n] = (Σ_k a[m · lda + k] · src[n · col_stride + k]) (· scale[n]) for rows
// m < M and columns n in [n0, n1); K values per column.  Each sum: the lanes of W partial sums
// (lane l: the FMAs of k ≡ l mod W, in increasing k; W = Vec<T, kDotBytes>::width) added in a fixed
// order (column_sums).
template <class T>
__attribute__((noinline)) void dot_columns(int64_t M, const T* a, int64_t lda, int64_t K,
                                           const T* src, int64_t col_stride, int64_t n0,
                                           int64_t n1, const T* scale, T* out, int64_t ldo) {
  constexpr int W = Vec<T, kDotBytes>::width;
  constexpr int NC = kDotColumns;
  for (int64_t n = n0; n < n1; n += NC) {
    const int nc = int(n1 - n < NC ? n1 - n : NC);
    const T* column[NC];
    for (int j = 0; j < NC; ++j) column[j] = src + (n + (j < nc ? j : 0)) * col_stride;
    for (int64_t m = 0; m < M; ++m) {
      const T* am = a + m * lda;
      DV<T> acc[NC];
      for (int j = 0; j < NC; ++j) acc[j] = DV<T>{};
      int64_t k = 0;
      for (; k + W <= K; k += W) {
        const DV<T> av = load<T, kDotBytes>(am + k);
        for (int j = 0; j < NC; ++j) acc[j] = fmadd(av, load<T, kDotBytes>(column[j] + k), acc[j]);
      }
      if (k < K) {
        const DV<T> av = load_n<T, kDotBytes>(am + k, K - k);
        for (int j = 0; j < NC; ++j) acc[j] = fmadd(av, load_n<T, kDotBytes>(column[j] + k, K - k), acc[j]);
      }
      T sums[NC];
      column_sums(acc, sums);
      T* o = out + m * ldo + n;
      for (int j = 0; j < nc; ++j) o[j] = scale ? sums[j] * scale[n + j] : sums[j];
    }
  }
}

constexpr int kAxpyVectors = 8;  // vectors of columns per pass of axpy_rows

// out[m · ldo + n] = Σ_k a[m · lda + k] · (src[k · row_stride + n] (· scale[n])) for rows m < M
// and columns n in [n0, n1): B's rows read where they lie, each element the FMA chain over
// increasing k from zero of the packed micro-kernel on B packed with the same column scale
// (pack_panels rounds the same products), so the same bits as the packed product.
template <class T, bool kScaled>
void axpy_rows_pass(int64_t K, const T* am, const T* row, int64_t row_stride, const T* scale,
                    int full, int64_t rest, T* o) {
  constexpr int W = Vec<T>::width;
  constexpr int NV = kAxpyVectors;
  V<T> acc[NV], s[NV];
  for (int j = 0; j < NV; ++j) {
    acc[j] = splat<T>(T(0));
    s[j] = kScaled && j <= full && (j < full || rest) ? load_n(scale + j * W, j < full ? W : rest)
                                                      : splat<T>(T(1));
  }
  const auto b = [&](const T* r, int j, int64_t n) {
    const V<T> v = n == W ? load(r + j * W) : load_n(r + j * W, n);
    return kScaled ? v * s[j] : v;
  };
  if (full == NV) {
    for (int64_t k = 0; k < K; ++k, row += row_stride) {
      const V<T> av = broadcast(am + k);
      for (int j = 0; j < NV; ++j) acc[j] = fmadd(av, b(row, j, W), acc[j]);
    }
  } else {
    for (int64_t k = 0; k < K; ++k, row += row_stride) {
      const V<T> av = broadcast(am + k);
      for (int j = 0; j < full; ++j) acc[j] = fmadd(av, b(row, j, W), acc[j]);
      if (rest) acc[full] = fmadd(av, b(row, full, rest), acc[full]);
    }
  }
  for (int j = 0; j < full; ++j) store(o + j * W, acc[j]);
  if (rest) store_n(o + full * W, acc[full], rest);
}

template <class T>
__attribute__((noinline)) void axpy_rows(int64_t M, const T* a, int64_t lda, int64_t K,
                                         const T* src, int64_t row_stride, int64_t n0, int64_t n1,
                                         const T* scale, T* out, int64_t ldo) {
  constexpr int W = Vec<T>::width;
  constexpr int64_t step = kAxpyVectors * W;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = n0; n < n1; n += step) {
      const int64_t width = n1 - n < step ? n1 - n : step;
      const int full = int(width / W);
      const int64_t rest = width - full * W;
      if (scale)
        axpy_rows_pass<T, true>(K, a + m * lda, src + n, row_stride, scale + n, full, rest,
                                out + m * ldo + n);
      else
        axpy_rows_pass<T, false>(K, a + m * lda, src + n, row_stride, nullptr, full, rest,
                                 out + m * ldo + n);
    }
}

// The unpacked product of whichever layout m has: by columns (dot_columns) when they are
// contiguous, else by rows (axpy_rows; m's rows contiguous).  m: element (k, n) at data[k · rs +
// n · cs] for n < N; out[row · ldo + n] for n in [n0, n1) (· scale[n]; null: none).
template <class T>
void unpacked_product(int64_t M, const T* a, int64_t lda, int64_t K, const StridedMatrix<T>& m,
                      int64_t n0, int64_t n1, const T* scale, T* out, int64_t ldo) {
  if (m.rs == 1)
    dot_columns(M, a, lda, K, m.data, m.cs, n0, n1, scale, out, ldo);
  else
    axpy_rows(M, a, lda, K, m.data, m.rs, n0, n1, scale, out, ldo);
}

// Whether a forward loop's one-row products read `m` (depth K, `columns` columns in all)
// unpacked: a batch of one, and m's columns contiguous with K ≥ 256 and m larger than half a
// core's L2 (dot_columns; below that depth the lane sums cost more than the packing saves over
// a sequence: H = 128 inference ran 5 % slower unpacked, H = 256, 512 10 % faster on an AVX2 VM
// with 512 KiB of L2; a packed matrix that stays in L2 is read faster by the packed kernel's
// full-line loads: H = 256 (1 MiB) inference 13-19 % faster packed with 2 MiB of L2, H = 512
// 0-4 % slower; docs/performance.md), or — `once`: the product is used for a single step of at
// most kOnceMaxRows rows (T = 1: LSTMBlockCell, a CudnnRNN generation step), where packing is a
// whole extra pass over m — its columns contiguous at any depth and any of those batches (each
// pass of 8 columns stays in L1 for all rows: a CudnnRNN step at H = 128, B = 1: 102 -> 61 µs,
// H = 200: 163 -> 90 µs; H = 512, B = 2 / 8 / 16: 0.38 / 0.67 / 0.74x the time, B = 32 1.01x)
// or, for one row, its rows (axpy_rows: the packed kernel's bits; it re-reads m for every
// row: LSTMBlockCell at B = 16, n = 512 ran 2.1x as long).  Not the
// backward's Rᵀ: read in place every step, its rows 4·P bytes apart cost a TLB miss each
// (H = 128–1024 training ran 5–30 % slower), and packing them is a plain copy.
constexpr int64_t kUnpackedMinDepth = 256;
template <class T>
inline bool reads_unpacked(int64_t batch, const StridedMatrix<T>& m, int64_t depth,
                           int64_t columns, bool once) {
  if (!m.data || !unpacked_steps.load(std::memory_order_relaxed)) return false;
  if (m.rs == 1)
    return once || (batch == 1 && depth >= kUnpackedMinDepth &&
                    !fits_half_l2(depth * columns * int64_t(sizeof(T))));
  return once && batch == 1 && m.cs == 1;
}

// Column group g of m (G groups of `columns` columns; `blocks`: the column block holding group
// g, null: block g) as a matrix of its own.
template <class T>
inline StridedMatrix<T> column_group(const StridedMatrix<T>& m, int64_t g, int64_t columns,
                                     const int64_t* blocks = nullptr) {
  return StridedMatrix<T>{m.data + (blocks ? blocks[g] : g) * columns * m.cs, m.rs, m.cs};
}

// Workspace values gemm_panels needs for M rows and depth K: the packed A, and (K > k_chunk) a
// contiguous [M, 4·NR] tile holding the partial sums between K chunks.
template <class T>
constexpr size_t gemm_workspace_values(int64_t M, int64_t K) {
  return size_t(M * K + (K > k_chunk<T> ? M * 4 * PackedMatrix<T>::nr : 0));
}

// The first half of gemm_panels (below): A's M rows (row stride lda) packed into `work` for B's depth.
template <class T>
void pack_gemm_rows(int64_t M, const T* A, int64_t lda, const PackedMatrix<T>& B, T* work) {
  pack_rows(A, lda, int64_t(1), M, int64_t(0), B.rows, work);
}

// The second half: `work` holds A packed by pack_gemm_rows (the same M and B.rows), so several
// panel ranges of one product pack A once.
template <class T>
void gemm_packed(int64_t M, const T* a_pack, const PackedMatrix<T>& B, int64_t first, int64_t last,
                 T* C, int64_t ldc, T* work) {
  constexpr int nr = PackedMatrix<T>::nr;
  const int64_t panel_stride = B.panel_rows() * nr;
  if (first >= last) return;
  const bool chunked = B.rows > k_chunk<T>;
  T* tile = work + M * B.rows;
  // Panels outermost (a panel's K chunk is reused from L1 by every row block), panels_per_call
  // of them at a time.
  const int step = panels_per_call(int(M < kMaxRows ? M : kMaxRows));
  const bool streams = M >= 3 && B.values() * sizeof(T) > kL2ResidentBytes;
  for (int64_t g = 0; g < B.groups; ++g) {
    for (int64_t j = first; j < last; j += step) {
      const int panels = int(last - j < step ? last - j : step);
      const int64_t j_last = j + panels - 1;
      const int64_t last_width = B.columns - j_last * nr < nr ? B.columns - j_last * nr : nr;
      const int64_t width = (panels - 1) * nr + last_width;
      const T* panel = B.panel(g, j);
      T* c_block = C + g * B.columns + j * nr;
      T* out = chunked ? tile : c_block;
      const int64_t ldo = chunked ? panels * nr : ldc;
      for (int64_t k0 = 0; k0 < B.rows || k0 == 0; k0 += k_chunk<T>) {
        const int64_t k1 = B.rows - k0 < k_chunk<T> ? B.rows : k0 + k_chunk<T>;
        // The chunk computed next (these panels' next K chunk, else the next panels' first),
        // fetched into L2 a line or two per k and panel over this chunk's row blocks, so that a
        // matrix streaming from L3 or memory arrives while the kernel computes instead of between.
        const T* next = nullptr;
        int64_t next_rows = 0, next_panels = panels;
        if (streams) {
          if (k1 < B.rows) {
            next = panel + k1 * nr;
            next_rows = B.rows - k1 < k_chunk<T> ? B.rows - k1 : k_chunk<T>;
          } else if (j + step < last || g + 1 < B.groups) {
            const int64_t next_j = j + step < last ? j + step : first;
            next = B.panel(j + step < last ? g : g + 1, next_j);
            next_rows = B.rows < k_chunk<T> ? B.rows : k_chunk<T>;
            next_panels = last - next_j < step ? last - next_j : step;
          }
        }
        const int64_t ahead_stride = next_panels > 1 ? panel_stride * int64_t(sizeof(T)) : 0;
        const int64_t blocks = (M + kMaxRows - 1) / kMaxRows;
        const int64_t next_lines = next_rows * nr * int64_t(sizeof(T)) / 64;
        const char* next_bytes = reinterpret_cast<const char*>(next);
        for (int64_t m = 0, b = 0; m < M; m += kMaxRows, ++b) {
          const int rows = int(M - m < kMaxRows ? M - m : kMaxRows);
          const char* ahead = next_bytes + b * next_lines / blocks * 64;
          const char* ahead_end = next_bytes + (b + 1) * next_lines / blocks * 64;
          micro_rows<T>(rows, panels, k0, k1, a_pack + m * B.rows, panel, panel_stride,
                        out + m * ldo, ldo, chunked ? nr : last_width, k0 > 0, ahead, ahead_end,
                        ahead_stride);
        }
      }
      if (chunked)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t c = 0; c < width; ++c) c_block[m * ldc + c] = tile[m * ldo + c];
    }
  }
}

// C[m, g·N + n] = Σ_k A[m, k] B[k, g·N + n] for every group g and the columns of panels
// [first, last); M rows; A row stride lda (contiguous rows), C row stride ldc.  `work`:
// gemm_workspace_values(M, K) values (one per thread).  With several K chunks the partial sums
// live in a contiguous tile, not in C: C's rows are often a power of two apart (4H columns),
// and re-reading them between chunks would evict the panel from L1 (its rows share a set).
template <class T>
void gemm_panels(int64_t M, const T* A, int64_t lda, const PackedMatrix<T>& B, int64_t first,
                 int64_t last, T* C, int64_t ldc, T* work) {
  if (first >= last) return;
  pack_gemm_rows(M, A, lda, B, work);
  gemm_packed(M, work, B, first, last, C, ldc, work);
}

// Workspace owned by one call (RAII over workspace_alloc).
template <class T>
struct Buffer {
  T* data = nullptr;
  explicit Buffer(size_t count) : data(static_cast<T*>(workspace_alloc((count ? count : 1) * sizeof(T)))) {}
  ~Buffer() { workspace_free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// One workspace of `values` values per thread of a team (e.g. each thread's packed A).
template <class T>
struct PerThread {
  size_t stride;
  Buffer<T> buffer;
  PerThread(int threads, size_t values)
      : stride((values + 15) / 16 * 16), buffer(size_t(threads) * stride) {}
  T* of(int thread) const { return buffer.data + size_t(thread) * stride; }
};

// Rows [0, live) of a step hold all its valid rows when the invalid ones trail, as in a batch
// sorted by decreasing length (fusedrnn/cudnn/_stack.py sorts it): the step's GEMMs and cell
// math run on those rows only, and the trailing rows keep their state.  Each row's result is
// the same whatever the number of rows computed with it.
inline int64_t live_rows(const uint8_t* valid, int64_t batch) {
  if (!valid) return batch;
  while (batch > 0 && !valid[batch - 1]) --batch;
  return batch;
}

// Rows of the input-projection chunks computed inside the time loops: enough rows for the
// GEMM to run at full speed, few enough that the chunk stays in L2.
constexpr int64_t kProjectionRows = 128;

// The input projection x_t W + b of a chunk of steps, computed inside a time loop by each thread for
// its own panels (no barrier: x and W are read-only, each thread writes its own columns).  With
// `valid`, only each step's rows up to its last valid one (live_rows) are projected: they are
// copied together (each thread its own copy) and their projections stored one step after the
// other, so that step t's rows b < live_rows(t) are at the returned pointer + b · G·H.
template <class T>
struct ChunkedProjection {
  const T* x = nullptr;  // [T, B, I], step t's rows x_rows · I values after step t - 1's
  const uint8_t* valid = nullptr;  // [T, B] or null, step t's at valid + t · x_rows
  int64_t inputs = 0, batch = 0, chunk_steps = 1;
  int64_t x_rows = 0;    // B, or more: the loop runs on a slice of a larger batch
  PackedMatrix<T> w;     // W [I, G·H]: K = I, G groups of H columns (data null: `unpacked`)
  StridedMatrix<T> unpacked;  // W read where it lies (reads_unpacked; data null: w is packed)
  const int64_t* blocks = nullptr;  // the column block of W holding group g (null: block g)
  const T* bias = nullptr;   // [G·H]: buffer = x W + bias (NumPy's `out += bias`)
  const T* scale = nullptr;  // [G·H] or null: then (x W + bias) · scale
  T* buffer = nullptr;   // [chunk_steps, B, G·H]

  static int64_t steps_per_chunk(int64_t steps, int64_t batch) {
    const int64_t n = batch > 0 ? (kProjectionRows + batch - 1) / batch : 1;
    return n < steps ? n : (steps > 0 ? steps : 1);
  }
  // Rows of the chunk's steps [t0, t0 + n) that are projected.
  int64_t projected_rows(int64_t t0, int64_t n) const {
    if (!valid) return n * batch;
    int64_t rows = 0;
    for (int64_t s = t0; s < t0 + n; ++s) rows += live_rows(valid + s * x_rows, batch);
    return rows;
  }

  // Whether the chunk's rows are gathered into `compact` first (not one run of x).
  bool gathers() const { return valid || x_rows != batch; }

  // Computes panels [first, last) of the chunk that starts at step t0.  `pack`: first pack the
  // chunk's rows of x into `work` (else this thread packed them for an earlier panel range of the
  // same chunk).  `work`: ProjectionBuffers::work values of this thread.
  void compute(int64_t t0, int64_t steps, int64_t first, int64_t last, T* work, bool pack) const {
    const int64_t n = steps - t0 < chunk_steps ? steps - t0 : chunk_steps, width = w.groups * w.columns;
    const int64_t rows = projected_rows(t0, n);
    T* compact = work + gemm_workspace_values<T>(chunk_steps * batch, inputs);  // gathers()
    if (pack) {
      const T* rows_x = x + t0 * batch * inputs;
      if (gathers()) {  // the live rows of each step, one after the other
        for (int64_t s = t0, r = 0; s < t0 + n; ++s) {
          const int64_t live = valid ? live_rows(valid + s * x_rows, batch) : batch;
          std::memcpy(compact + r * inputs, x + s * x_rows * inputs, size_t(live * inputs) * sizeof(T));
          r += live;
        }
        rows_x = compact;
      }
      if (!unpacked.data) pack_gemm_rows(rows, rows_x, inputs, w, work);
    }
    const int64_t u0 = first * w.nr, u1 = last * w.nr < w.columns ? last * w.nr : w.columns;
    if (unpacked.data) {
      const T* rows_x = gathers() ? compact : x + t0 * batch * inputs;
      for (int64_t g = 0; g < w.groups; ++g)
        unpacked_product(rows, rows_x, inputs, inputs, column_group(unpacked, g, w.columns, blocks), u0,
                         u1, static_cast<const T*>(nullptr), buffer + g * w.columns, width);
    } else {
      gemm_packed(rows, work, w, first, last, buffer, width, work);
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < w.groups; ++g) {
        T* row = buffer + r * width + g * w.columns;
        const T* b = bias + g * w.columns;
        for (int64_t u = u0; u < u1; ++u) row[u] += b[u];
        if (scale)
          for (int64_t u = u0; u < u1; ++u) row[u] *= scale[g * w.columns + u];
      }
  }

  bool starts_chunk(int64_t t) const { return t % chunk_steps == 0; }

  // Step t's rows of x_t W + b (computed by `compute` for the chunk that holds t).
  const T* at(int64_t t) const {
    const int64_t in_chunk = t % chunk_steps;
    return buffer + projected_rows(t - in_chunk, in_chunk) * w.groups * w.columns;
  }

};

// The buffers of a job's ChunkedProjection (the packed W, the chunk of x W + b), set up from the
// job's recurrent matrix (same panels, so each thread projects its own units' columns); no
// buffers when x is null (the caller gave the projection), no packed W when `unpacked` holds W
// (reads_unpacked).  `work`: the per-thread GEMM workspace values the projection needs.
template <class T>
struct ProjectionBuffers {
  Buffer<T> packed_w, chunk;
  size_t work = 0;

  ProjectionBuffers(ChunkedProjection<T>& p, const PackedMatrix<T>& rec, const T* x,
                    int64_t inputs, int64_t steps, int64_t batch, const T* bias, const T* scale,
                    const uint8_t* valid, StridedMatrix<T> unpacked = {}, int64_t x_rows = 0)
      : packed_w(x && !unpacked.data ? with_rows(rec, inputs).values() : 0),
        chunk(x ? size_t(ChunkedProjection<T>::steps_per_chunk(steps, batch) * batch * rec.groups *
                         rec.columns)
                : 0) {
    p.w = with_rows(rec, x ? inputs : 0);
    p.w.data = packed_w.data;
    p.unpacked = x ? unpacked : StridedMatrix<T>{};
    p.x = x; p.valid = valid; p.inputs = inputs; p.batch = batch; p.bias = bias; p.scale = scale;
    p.x_rows = x_rows ? x_rows : batch;
    p.chunk_steps = ChunkedProjection<T>::steps_per_chunk(steps, batch);
    p.buffer = chunk.data;
    const int64_t rows = p.chunk_steps * batch;
    if (x) work = gemm_workspace_values<T>(rows, inputs) + (p.gathers() ? size_t(rows * inputs) : 0);
  }

 private:
  static PackedMatrix<T> with_rows(PackedMatrix<T> m, int64_t rows) {
    m.rows = rows;
    m.capacity = 0;
    return m;
  }
};

// Per-thread GEMM workspace values of a time loop whose step GEMMs have `batch` rows and depth
// ≤ `depth`, with its input projection (if any).
template <class T>
size_t loop_workspace_values(int64_t batch, int64_t depth, const ProjectionBuffers<T>& projection) {
  const size_t step = gemm_workspace_values<T>(batch, depth);
  return step > projection.work ? step : projection.work;
}

// Thread t's share [first, last) of `count` blocks split over n threads.
inline void split_blocks(int64_t count, int t, int n, int64_t* first, int64_t* last) {
  *first = count * t / n;
  *last = count * (t + 1) / n;
}

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn
