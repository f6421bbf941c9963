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
  int64_t bytes() const { return int64_t(values() * sizeof(T)); }
  T* panel(int64_t g, int64_t j) const { return data + ((g * panels() + j) * panel_rows()) * nr; }
};

// One panel from contiguous columns: dst[k · NR + c] = column_c[k] (· scale[c]) for the
// `width` columns column_c = first + c · col_stride, zeros in the columns past `width`.  Tiles of
// Tile<T>::size columns × rows are transposed in registers where the ISA has it (the values and
// their products are those of the scalar loop: only the order of the stores differs), a row of
// tiles across the panel at a time, so that each panel row's lines are written whole at once
// (a column of tiles at a time wrote them in pieces a panel apart: packing [K, 4K] at K = 512,
// 1024 ran 14-15 % slower on an Intel Xeon).
template <class T>
inline void pack_columns_scalar(const T* first, int64_t col_stride, int64_t k_begin, int64_t k_end,
                                int64_t c_begin, int64_t c_end, const T* scale, T* dst) {
  constexpr int nr = PackedMatrix<T>::nr;
  for (int64_t c = c_begin; c < c_end; ++c) {
    const T* column = first + c * col_stride;
    if (scale) {
      for (int64_t k = k_begin; k < k_end; ++k) dst[k * nr + c] = column[k] * scale[c];
    } else {
      for (int64_t k = k_begin; k < k_end; ++k) dst[k * nr + c] = column[k];
    }
  }
}

#if FUSEDRNN_VECTOR_BYTES >= 32
// 8 × 8 floats / 4 × 4 doubles: rows[i] holds column c0 + i at k0 ... ; after the transpose
// rows[j] holds row k0 + j at columns c0 ... (AVX2 instructions: the AVX-512 build uses them too).
inline void transpose_tile(__m256 rows[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(rows[0], rows[1]), t1 = _mm256_unpackhi_ps(rows[0], rows[1]);
  const __m256 t2 = _mm256_unpacklo_ps(rows[2], rows[3]), t3 = _mm256_unpackhi_ps(rows[2], rows[3]);
  const __m256 t4 = _mm256_unpacklo_ps(rows[4], rows[5]), t5 = _mm256_unpackhi_ps(rows[4], rows[5]);
  const __m256 t6 = _mm256_unpacklo_ps(rows[6], rows[7]), t7 = _mm256_unpackhi_ps(rows[6], rows[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  rows[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  rows[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  rows[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  rows[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  rows[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  rows[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  rows[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  rows[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

inline void transpose_tile(__m256d rows[4]) {
  const __m256d t0 = _mm256_unpacklo_pd(rows[0], rows[1]), t1 = _mm256_unpackhi_pd(rows[0], rows[1]);
  const __m256d t2 = _mm256_unpacklo_pd(rows[2], rows[3]), t3 = _mm256_unpackhi_pd(rows[2], rows[3]);
  rows[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
  rows[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
  rows[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
  rows[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

template <class T> struct TileRegister;
template <> struct TileRegister<float> { using type = __m256; };
template <> struct TileRegister<double> { using type = __m256d; };

// A register of a transposed tile: its size × size values, loaded and stored unaligned.
template <class T>
struct Tile {
  using reg = typename TileRegister<T>::type;
  static constexpr int size = 32 / int(sizeof(T));
  static reg load(const T* p) {
    reg v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(T* p, reg v) { std::memcpy(p, &v, sizeof v); }
};
#endif

template <class T>
void pack_columns(const T* first, int64_t col_stride, int64_t rows, int64_t width, const T* scale,
                  T* dst) {
  constexpr int nr = PackedMatrix<T>::nr;
  int64_t tiled_columns = 0;
#if FUSEDRNN_VECTOR_BYTES >= 32
  using tile = Tile<T>;
  constexpr int S = tile::size;
  tiled_columns = width / S * S;
  const int64_t tiled_rows = rows / S * S;
  for (int64_t k0 = 0; k0 < tiled_rows; k0 += S) {
    for (int64_t c0 = 0; c0 < tiled_columns; c0 += S) {
      typename tile::reg r[S];
      for (int i = 0; i < S; ++i) {
        r[i] = tile::load(first + (c0 + i) * col_stride + k0);
        if (scale) r[i] = r[i] * scale[c0 + i];
      }
      transpose_tile(r);
      for (int j = 0; j < S; ++j) tile::store(dst + (k0 + j) * nr + c0, r[j]);
    }
  }
  pack_columns_scalar(first, col_stride, tiled_rows, rows, 0, tiled_columns, scale, dst);
#endif
  pack_columns_scalar(first, col_stride, 0, rows, tiled_columns, width, scale, dst);
  for (int64_t c = width; c < nr; ++c)
    for (int64_t k = 0; k < rows; ++k) dst[k * nr + c] = T(0);
}

// Rows of kPackPanelsTile k at a time: each of a row-major B's rows is read once, in order, while
// its NR-value pieces go to the panels (panel by panel a k loop read one line per row, rows
// 4·H values apart: a page apart at H = 256, which no hardware prefetcher follows; the BlockLSTM
// family's w is row-major).
constexpr int64_t kPackPanelsTile = 8;

// Panels [first, last) of group g of a B whose rows are contiguous (element (k, n) at
// group[k · row_stride + n], or at group[k_rows[k] · row_stride + n] when `k_rows` is given: B's
// rows gathered as they are packed), scaled by `scale` (length N, or null).
template <class T>
void pack_row_major(const T* group, int64_t row_stride, const PackedMatrix<T>& m, int64_t g,
                    int64_t first, int64_t last, const T* scale,
                    const int64_t* k_rows = nullptr) {
  constexpr int nr = PackedMatrix<T>::nr;
  for (int64_t k0 = 0; k0 < m.rows; k0 += kPackPanelsTile) {
    const int64_t k1 = m.rows - k0 < kPackPanelsTile ? m.rows : k0 + kPackPanelsTile;
    for (int64_t j = first; j < last; ++j) {
      const int64_t n0 = j * nr;
      const int64_t width = m.columns - n0 < nr ? m.columns - n0 : nr;
      T* dst = m.panel(g, j);
      const T* s = scale ? scale + n0 : nullptr;
      for (int64_t k = k0; k < k1; ++k) {
        const T* row = group + (k_rows ? k_rows[k] : k) * row_stride + n0;
        T* out = dst + k * nr;
        if (width == nr) {  // two vectors
          constexpr int W = Vec<T>::width;
          if (s) {
            store(out, load(row) * load(s));
            store(out + W, load(row + W) * load(s + W));
          } else {
            store(out, load(row));
            store(out + W, load(row + W));
          }
        } else {
          for (int64_t c = 0; c < width; ++c) out[c] = s ? row[c] * s[c] : row[c];
          for (int64_t c = width; c < nr; ++c) out[c] = T(0);
        }
      }
    }
  }
}

// Packs panels j in [first, last) of every group (each thread packs the panels it computes);
// `column_scale` (length G·N, or null) multiplies column n's values as they are packed;
// `group_blocks` (length G, or null: in order) names the column block of src that holds group g;
// `k_rows` (length m.rows, or null): B's row k is src's row k_rows[k] (a gather; only for a B
// whose rows are contiguous, col_stride 1).
template <class T>
void pack_panels(const T* src, int64_t row_stride, int64_t col_stride, const PackedMatrix<T>& m,
                 int64_t first, int64_t last, const T* column_scale = nullptr,
                 const int64_t* group_blocks = nullptr, const int64_t* k_rows = nullptr) {
  constexpr int nr = PackedMatrix<T>::nr;
  for (int64_t g = 0; g < m.groups; ++g) {
    const T* group = src + (group_blocks ? group_blocks[g] : g) * m.columns * col_stride;
    if (k_rows || (col_stride == 1 && row_stride != 1)) {
      pack_row_major(group, row_stride, m, g, first, last,
                     column_scale ? column_scale + g * m.columns : nullptr, k_rows);
      continue;
    }
    for (int64_t j = first; j < last; ++j) {
      T* dst = m.panel(g, j);
      const int64_t n0 = j * nr;
      const int64_t width = m.columns - n0 < nr ? m.columns - n0 : nr;
      if (row_stride == 1 && col_stride != 1) {
        // B's columns are contiguous (a transposed view): read each column once, in order.
        const T* first_column = group + n0 * col_stride;
        const T* scale = column_scale ? column_scale + g * m.columns + n0 : nullptr;
        pack_columns(first_column, col_stride, m.rows, width, scale, dst);
        continue;
      }
      for (int64_t k = 0; k < m.rows; ++k) {
        const T* row = group + k * row_stride + n0 * col_stride;
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


// dst[i, j] = src[i, j] for a rows × cols matrix, both read/written through element strides (an
// exact copy).  Where one side's rows and the other's columns are contiguous (a transposing copy:
// the weight gradients into BlockLSTM's [I+H, 4H] layout) tiles are transposed in registers
// (Tile), in blocks of kCopyBlock × kCopyBlock so that both sides' cache lines are used whole;
// elsewhere scalar blocks.
template <class T>
void copy_matrix(int64_t rows, int64_t cols, const T* src, int64_t srs, int64_t scs, T* dst,
                 int64_t drs, int64_t dcs) {
  constexpr int64_t kCopyBlock = 32;
  for (int64_t i0 = 0; i0 < rows; i0 += kCopyBlock) {
    const int64_t i1 = rows - i0 < kCopyBlock ? rows : i0 + kCopyBlock;
    for (int64_t j0 = 0; j0 < cols; j0 += kCopyBlock) {
      const int64_t j1 = cols - j0 < kCopyBlock ? cols : j0 + kCopyBlock;
      int64_t i_tiled = i0, j_tiled = j0;  // the block's tiled part is [i0, i_tiled) × [j0, j_tiled)
#if FUSEDRNN_VECTOR_BYTES >= 32
      using tile = Tile<T>;
      constexpr int S = tile::size;
      // with the roles of i and j swapped where src's rows and dst's columns are contiguous
      const bool down = srs == 1 && dcs == 1, across = scs == 1 && drs == 1;
      if (down || across) {
        i_tiled = i0 + (i1 - i0) / S * S;
        j_tiled = j0 + (j1 - j0) / S * S;
        for (int64_t i = i0; i < i_tiled; i += S)
          for (int64_t j = j0; j < j_tiled; j += S) {
            typename tile::reg r[S];
            if (down) {  // r[q] = column j + q, rows i ...; transposed: r[p] = row i + p
              for (int q = 0; q < S; ++q) r[q] = tile::load(src + (j + q) * scs + i);
              transpose_tile(r);
              for (int p = 0; p < S; ++p) tile::store(dst + (i + p) * drs + j, r[p]);
            } else {     // r[p] = row i + p, columns j ...; transposed: r[q] = column j + q
              for (int p = 0; p < S; ++p) r[p] = tile::load(src + (i + p) * srs + j);
              transpose_tile(r);
              for (int q = 0; q < S; ++q) tile::store(dst + (j + q) * dcs + i, r[q]);
            }
          }
      }
#endif
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = (i < i_tiled ? j_tiled : j0); j < j1; ++j)
          dst[i * drs + j * dcs] = src[i * srs + j * scs];
    }
  }
}

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn
