// The sums over all T·B rows that are not GEMMs: out[c] = Σ_r a[r, c] · b[r, c] (the LSTM's
// peephole gradients, fusedrnn/engines/common.py product_sum), one thread, rows in order.
//
// float: each product is formed in float64 (where a float32 product is exact) and added in
// float64, the sum rounded once: the exact sum of the products, up to float64's round-off.
// double: products and sums in float64, a multiply then an add (no FMA: -ffp-contract=off).
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

template void product_sum<float>(int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*);
template void product_sum<double>(int64_t, int64_t, const double*, int64_t, const double*, int64_t,
                                  double*);

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn
