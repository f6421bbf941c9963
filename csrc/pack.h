// Packing a GEMM's right-hand matrix into the micro-kernel's panel layout, once per call.
//
// The logical matrix B[K, G·N] is G column groups (the gates) of N columns each.  Each group is
// cut into panels of NR = 2 vector widths columns (the last one zero-padded); panel (g, j)
// holds columns g·N + j·NR ... as K rows of NR contiguous values:
//     packed[((g · panels + j) · K + k) · NR + c] = B[k, g·N + j·NR + c]   (0 past N)
// B is read through strides (element (k, n) at src[k · row_stride + n · col_stride]), so the
// same routine packs R (forward) and Rᵀ (backward) from the same [P, G·H] array.
#pragma once

#include "simd.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

template <class T>
struct PackedMatrix {
  static constexpr int nr = 2 * Vec<T>::width;
  T* data = nullptr;
  int64_t rows = 0;     // K
  int64_t columns = 0;  // N per group
  int64_t groups = 1;   // G
  int64_t capacity = 0; // rows a panel has room for (0: rows); a K chunk may hold fewer
  int64_t panels() const { return (columns + nr - 1) / nr; }
  int64_t panel_rows() const { return capacity ? capacity : rows; }
  size_t values() const { return size_t(groups * panels() * panel_rows() * nr); }
  T* panel(int64_t g, int64_t j) const { return data + ((g * panels() + j) * panel_rows()) * nr; }
};

// Packs panels j in [first, last) of every group (each thread packs the panels it computes);
// `column_scale` (length G·N, or null) multiplies column n's values as they are packed.
template <class T>
void pack_panels(const T* src, int64_t row_stride, int64_t col_stride, const PackedMatrix<T>& m,
                 int64_t first, int64_t last, const T* column_scale = nullptr) {
  constexpr int nr = PackedMatrix<T>::nr;
  for (int64_t g = 0; g < m.groups; ++g) {
    for (int64_t j = first; j < last; ++j) {
      T* dst = m.panel(g, j);
      const int64_t n0 = j * nr;
      const int64_t width = m.columns - n0 < nr ? m.columns - n0 : nr;
      if (row_stride == 1 && col_stride != 1) {
        // B's columns are contiguous (a transposed view): read each column once, in order.
        for (int64_t c = 0; c < nr; ++c) {
          if (c >= width) {
            for (int64_t k = 0; k < m.rows; ++k) dst[k * nr + c] = T(0);
            continue;
          }
          const T* column = src + (g * m.columns + n0 + c) * col_stride;
          if (column_scale) {
            const T scale = column_scale[g * m.columns + n0 + c];
            for (int64_t k = 0; k < m.rows; ++k) dst[k * nr + c] = column[k] * scale;
          } else {
            for (int64_t k = 0; k < m.rows; ++k) dst[k * nr + c] = column[k];
          }
        }
        continue;
      }
      for (int64_t k = 0; k < m.rows; ++k) {
        const T* row = src + k * row_stride + (g * m.columns + n0) * col_stride;
        if (column_scale) {
          const T* scale = column_scale + g * m.columns + n0;
          for (int64_t c = 0; c < nr; ++c)
            dst[k * nr + c] = c < width ? row[c * col_stride] * scale[c] : T(0);
        } else {
          for (int64_t c = 0; c < nr; ++c) dst[k * nr + c] = c < width ? row[c * col_stride] : T(0);
        }
      }
    }
  }
}

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn
