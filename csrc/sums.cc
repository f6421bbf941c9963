// The sums over all T·B rows that are not GEMMs, one thread, rows in order:
//
// product_sum: out[c] = Σ_r a[r, c] · b[r, c] (the LSTM's peephole gradients,
// fusedrnn/engines/common.py product_sum).  float: each product is formed in float64 (where a
// float32 product is exact) and added in float64, the sum rounded once: the exact sum of the
// products, up to float64's round-off.  double: products and sums in float64, a multiply then an
// add (no FMA: -ffp-contract=off).
//
// column_sum: out[c] = Σ_r a[r, c] (the bias gradients, fusedrnn/engines/common.py column_sum),
// the same operations in the same order as that NumPy reference, so the same bits.  float: the
// rows in blocks of kSumBlockRows, each block summed in float32 from +0 in row order, the block
// sums added in float64 from +0 in block order, the rows after the last whole block added in
// float64 from +0 in row order, then (tail + blocks) rounded once.  double: one float64 sum from
// +0 in row order.
#include "cells.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

template <class T>
void product_sum(int64_t rows, int64_t cols, const T* a, int64_t a_rs, const T* b, int64_t b_rs,
                 T* out) {
  constexpr int W = Vec<T>::width;
  typedef double Wide __attribute__((vector_size(W * sizeof(double))));
  Buffer<double> sums{size_t(cols)};
  for (int64_t c = 0; c < cols; ++c) sums.data[c] = 0.0;
  const int64_t vector_cols = cols / W * W;
  for (int64_t r = 0; r < rows; ++r) {
    const T* ar = a + r * a_rs;
    const T* br = b + r * b_rs;
    for (int64_t c = 0; c < vector_cols; c += W) {
      Wide sum;
      std::memcpy(&sum, sums.data + c, sizeof sum);
      sum += __builtin_convertvector(load(ar + c), Wide) * __builtin_convertvector(load(br + c), Wide);
      std::memcpy(sums.data + c, &sum, sizeof sum);
    }
    for (int64_t c = vector_cols; c < cols; ++c) sums.data[c] += double(ar[c]) * double(br[c]);
  }
  for (int64_t c = 0; c < cols; ++c) out[c] = T(sums.data[c]);
}

constexpr int64_t kSumBlockRows = 16;  // common.py SUM_BLOCK_ROWS
constexpr int kChains = 4;  // vectors of columns summed at once: independent chains of adds

inline void column_sum_rows(int64_t rows, int64_t cols, const double* a, int64_t a_rs, double* out) {
  for (int64_t c = 0; c < cols; ++c) out[c] = 0.0;
  for (int64_t r = 0; r < rows; ++r) add_to_sums(a + r * a_rs, out, cols);
}

inline void column_sum_rows(int64_t rows, int64_t cols, const float* a, int64_t a_rs, float* out) {
  constexpr int W = Vec<float>::width;
  const int64_t vector_cols = cols / W * W;
  // [0, cols): the blocks' float64 total; [cols, 2 cols): the tail's
  Buffer<double> sums{size_t(2 * cols)};
  double* blocks_total = sums.data;
  double* tail_total = sums.data + cols;
  for (int64_t c = 0; c < 2 * cols; ++c) sums.data[c] = 0.0;
  const int64_t whole = rows / kSumBlockRows * kSumBlockRows;
  for (int64_t r0 = 0; r0 < whole; r0 += kSumBlockRows) {
    // one block's float32 column sums, kChains vectors at a time (one chain is latency-bound)
    for (int64_t c0 = 0; c0 < vector_cols; c0 += kChains * W) {
      const int chains = vector_cols - c0 >= kChains * W ? kChains : int((vector_cols - c0) / W);
      V<float> block[kChains];
      for (int j = 0; j < kChains; ++j) block[j] = splat<float>(0.0f);
      for (int64_t r = r0; r < r0 + kSumBlockRows; ++r) {
        const float* row = a + r * a_rs + c0;
        for (int j = 0; j < kChains; ++j)
          if (j < chains) block[j] += load(row + j * W);
      }
      float block_sums[kChains * W];
      for (int j = 0; j < chains; ++j) store(block_sums + j * W, block[j]);
      add_to_sums(block_sums, blocks_total + c0, chains * W);
    }
    for (int64_t c = vector_cols; c < cols; ++c) {
      float block = 0.0f;
      for (int64_t r = r0; r < r0 + kSumBlockRows; ++r) block += a[r * a_rs + c];
      blocks_total[c] += double(block);
    }
  }
  for (int64_t r = whole; r < rows; ++r) add_to_sums(a + r * a_rs, tail_total, cols);
  for (int64_t c = 0; c < cols; ++c) out[c] = float(tail_total[c] + blocks_total[c]);
}

template <class T>
void column_sum(int64_t rows, int64_t cols, const T* a, int64_t a_rs, T* out) {
  column_sum_rows(rows, cols, a, a_rs, out);
}

template void product_sum<float>(int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*);
template void product_sum<double>(int64_t, int64_t, const double*, int64_t, const double*, int64_t,
                                  double*);
template void column_sum<float>(int64_t, int64_t, const float*, int64_t, float*);
template void column_sum<double>(int64_t, int64_t, const double*, int64_t, double*);

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn
