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

// Rows [0, MR) of C's panel columns (+)= A[:, k0:k1] · panel[k0:k1]; `accumulate`: add to C.
template <class T, int MR>
inline void micro_kernel(int64_t k0, int64_t k1, const T* A, int64_t lda, const T* panel, T* C,
                         int64_t ldc, int64_t width, bool accumulate) {
  constexpr int W = Vec<T>::width;
  constexpr int nr = 2 * W;
  V<T> acc0[MR], acc1[MR];
  for (int r = 0; r < MR; ++r) {
    if (!accumulate) {
      acc0[r] = acc1[r] = splat<T>(T(0));
    } else if (width == nr) {
      acc0[r] = load(C + r * ldc);
      acc1[r] = load(C + r * ldc + W);
    } else {
      T buffer[nr] = {};
      for (int64_t c = 0; c < width; ++c) buffer[c] = C[r * ldc + c];
      acc0[r] = load(buffer);
      acc1[r] = load(buffer + W);
    }
  }
  for (int64_t k = k0; k < k1; ++k) {
    const V<T> b0 = load(panel + k * nr);
    const V<T> b1 = load(panel + k * nr + W);
    for (int r = 0; r < MR; ++r) {
      const V<T> a = splat<T>(A[r * lda + k]);
      acc0[r] = fmadd(a, b0, acc0[r]);
      acc1[r] = fmadd(a, b1, acc1[r]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    if (width == nr) {
      store(C + r * ldc, acc0[r]);
      store(C + r * ldc + W, acc1[r]);
    } else {
      T buffer[nr];
      store(buffer, acc0[r]);
      store(buffer + W, acc1[r]);
      for (int64_t c = 0; c < width; ++c) C[r * ldc + c] = buffer[c];
    }
  }
}

template <class T>
inline void micro_rows(int rows, int64_t k0, int64_t k1, const T* A, int64_t lda, const T* panel,
                       T* C, int64_t ldc, int64_t width, bool accumulate) {
  switch (rows) {
    case 1: micro_kernel<T, 1>(k0, k1, A, lda, panel, C, ldc, width, accumulate); break;
    case 2: micro_kernel<T, 2>(k0, k1, A, lda, panel, C, ldc, width, accumulate); break;
    case 3: micro_kernel<T, 3>(k0, k1, A, lda, panel, C, ldc, width, accumulate); break;
#if FUSEDRNN_VECTOR_BYTES >= 32
    case 4: micro_kernel<T, 4>(k0, k1, A, lda, panel, C, ldc, width, accumulate); break;
    case 5: micro_kernel<T, 5>(k0, k1, A, lda, panel, C, ldc, width, accumulate); break;
    case 6: micro_kernel<T, 6>(k0, k1, A, lda, panel, C, ldc, width, accumulate); break;
#else
    case 4: micro_kernel<T, 4>(k0, k1, A, lda, panel, C, ldc, width, accumulate); break;
#endif
    default: break;
  }
}

// C[m, g·N + n] = Σ_k A[m, k] B[k, g·N + n] for every group g and the columns of panels
// [first, last); M rows; A row stride lda, C row stride ldc.
template <class T>
void gemm_panels(int64_t M, const T* A, int64_t lda, const PackedMatrix<T>& B, int64_t first,
                 int64_t last, T* C, int64_t ldc) {
  constexpr int nr = PackedMatrix<T>::nr;
  for (int64_t g = 0; g < B.groups; ++g) {
    for (int64_t j = first; j < last; ++j) {
      const T* panel = B.panel(g, j);
      const int64_t n0 = g * B.columns + j * nr;
      const int64_t width = B.columns - j * nr < nr ? B.columns - j * nr : nr;
      for (int64_t k0 = 0; k0 < B.rows || k0 == 0; k0 += kKChunk) {
        const int64_t k1 = B.rows - k0 < kKChunk ? B.rows : k0 + kKChunk;
        for (int64_t m = 0; m < M; m += kMaxRows) {
          const int rows = int(M - m < kMaxRows ? M - m : kMaxRows);
          micro_rows<T>(rows, k0, k1, A + m * lda, lda, panel, C + m * ldc + n0, ldc, width, k0 > 0);
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
