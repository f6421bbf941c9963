// The per-step recurrent GEMM: C[M, G·N] = A[M, K] · B, B packed (pack.h), for a range of
// panels.  Register-blocked micro-kernel: MR rows × NR = 2 vectors columns of accumulators, one
// FMA per (row, vector, k), k in increasing order from zero; K is cut into chunks of kKChunk so
// that a panel's chunk stays in L1 while every row block uses it (between chunks the partial
// sums go through C exactly: storing and reloading a value does not round it).  Each output
// element is therefore computed by the same sequence of operations whichever thread or panel
// range computes it, and whatever the chunking: results are independent of the thread count.
#pragma once

#include "engine.h"
#include "pack.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

#if FUSEDRNN_VECTOR_BYTES >= 32
constexpr int kMaxRows = 6;  // 12 accumulators + 2 panel vectors + 1 broadcast ≤ 16 registers
#else
constexpr int kMaxRows = 4;
#endif

constexpr int64_t kKChunk = 256;

// Rows [0, MR) of the columns of NP consecutive panels (+)= A[:, k0:k1] · panels[k0:k1];
// `accumulate`: add to C.  Panel p starts `panel_stride` values after panel p-1 and its columns
// start at C + p·NR; only the last one may be narrower than NR (`last_width`).  NP > 1 gives a
// few rows enough independent accumulators to hide the FMA latency; each element's sum is the
// same sequence of FMAs whatever MR and NP.
template <class T, int MR, int NP>
inline void micro_kernel(int64_t k0, int64_t k1, const T* A, int64_t lda, const T* panel,
                         int64_t panel_stride, T* C, int64_t ldc, int64_t last_width,
                         bool accumulate) {
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
  for (int64_t k = k0; k < k1; ++k) {
    V<T> b[2 * NP];
    for (int p = 0; p < NP; ++p) {
      b[2 * p] = load(panel + p * panel_stride + k * nr);
      b[2 * p + 1] = load(panel + p * panel_stride + k * nr + W);
    }
    for (int r = 0; r < MR; ++r) {
      const V<T> a = splat<T>(A[r * lda + k]);
      for (int q = 0; q < 2 * NP; ++q) acc[r][q] = fmadd(a, b[q], acc[r][q]);
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

// Panels per kernel call for a block of `rows` rows (accumulators ≤ 12 registers).
inline int panels_per_call(int rows) { return rows == 1 ? 4 : rows == 2 ? 3 : 1; }

template <class T>
inline void micro_rows(int rows, int panels, int64_t k0, int64_t k1, const T* A, int64_t lda,
                       const T* panel, int64_t panel_stride, T* C, int64_t ldc, int64_t last_width,
                       bool accumulate) {
#define FUSEDRNN_KERNEL(MR, NP) \
  micro_kernel<T, MR, NP>(k0, k1, A, lda, panel, panel_stride, C, ldc, last_width, accumulate)
  if (rows == 1) {
    switch (panels) {
      case 4: FUSEDRNN_KERNEL(1, 4); return;
      case 3: FUSEDRNN_KERNEL(1, 3); return;
      case 2: FUSEDRNN_KERNEL(1, 2); return;
      default: FUSEDRNN_KERNEL(1, 1); return;
    }
  }
  if (rows == 2) {
    switch (panels) {
      case 3: FUSEDRNN_KERNEL(2, 3); return;
      case 2: FUSEDRNN_KERNEL(2, 2); return;
      default: FUSEDRNN_KERNEL(2, 1); return;
    }
  }
  switch (rows) {
    case 3: FUSEDRNN_KERNEL(3, 1); break;
    case 4: FUSEDRNN_KERNEL(4, 1); break;
#if FUSEDRNN_VECTOR_BYTES >= 32
    case 5: FUSEDRNN_KERNEL(5, 1); break;
    case 6: FUSEDRNN_KERNEL(6, 1); break;
#endif
    default: break;
  }
#undef FUSEDRNN_KERNEL
}

// C[m, g·N + n] = Σ_k A[m, k] B[k, g·N + n] for every group g and the columns of panels
// [first, last); M rows; A row stride lda, C row stride ldc.
template <class T>
void gemm_panels(int64_t M, const T* A, int64_t lda, const PackedMatrix<T>& B, int64_t first,
                 int64_t last, T* C, int64_t ldc) {
  constexpr int nr = PackedMatrix<T>::nr;
  const int64_t panel_stride = B.rows * nr;
  // Panels outermost (a panel's K chunk is reused from L1 by every row block); several panels
  // per call only when the whole GEMM has 1 or 2 rows.
  const int step = M < 3 ? panels_per_call(int(M)) : 1;
  for (int64_t g = 0; g < B.groups; ++g) {
    for (int64_t j = first; j < last; j += step) {
      const int panels = int(last - j < step ? last - j : step);
      const int64_t j_last = j + panels - 1;
      const int64_t last_width = B.columns - j_last * nr < nr ? B.columns - j_last * nr : nr;
      const T* panel = B.panel(g, j);
      for (int64_t k0 = 0; k0 < B.rows || k0 == 0; k0 += kKChunk) {
        const int64_t k1 = B.rows - k0 < kKChunk ? B.rows : k0 + kKChunk;
        for (int64_t m = 0; m < M; m += kMaxRows) {
          const int rows = int(M - m < kMaxRows ? M - m : kMaxRows);
          micro_rows<T>(rows, panels, k0, k1, A + m * lda, lda, panel, panel_stride,
                        C + m * ldc + g * B.columns + j * nr, ldc, last_width, k0 > 0);
        }
      }
    }
  }
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

// Thread t's share [first, last) of `count` blocks split over n threads.
inline void split_blocks(int64_t count, int t, int n, int64_t* first, int64_t* last) {
  *first = count * t / n;
  *last = count * (t + 1) / n;
}

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn
