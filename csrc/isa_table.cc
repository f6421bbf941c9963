// One ISA's EngineTable (compiled once per ISA like the cell kernels).
#include "cells.h"
#include "activations.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

namespace {

template <class T>
void tanh_hook(const T* in, T* out, int64_t n) {
  tanh_array(in, out, n);
}

template <class T>
void gemm_hook(int64_t M, int64_t K, int64_t N, const T* A, const T* Bm, T* C, int64_t repeats) {
  PackedMatrix<T> packed;
  packed.rows = K;
  packed.columns = N;
  Buffer<T> data(packed.values());
  packed.data = data.data;
  pack_panels(Bm, N, 1, packed, 0, packed.panels());
  Buffer<T> a_pack(gemm_workspace_values<T>(M, K));
  for (int64_t r = 0; r < repeats; ++r)
    gemm_panels(M, A, K, packed, 0, packed.panels(), C, N, a_pack.data);
}

#define FUSEDRNN_STR2(x) #x
#define FUSEDRNN_STR(x) FUSEDRNN_STR2(x)

const EngineTable kTable = {
    FUSEDRNN_STR(FUSEDRNN_ISA),
    PackedMatrix<float>::nr, PackedMatrix<double>::nr,
    &lstm_forward<float>, &lstm_forward<double>, &lstm_backward<float>, &lstm_backward<double>,
    &gru_forward<float>, &gru_forward<double>, &gru_backward<float>, &gru_backward<double>,
    &rnn_forward<float>, &rnn_forward<double>, &rnn_backward<float>, &rnn_backward<double>,
    &gemm<float>, &gemm<double>,
    &product_sum<float>, &product_sum<double>, &column_sum<float>, &column_sum<double>,
    &copy_matrix<float>, &copy_matrix<double>,
    &tanh_hook<float>, &tanh_hook<double>, &gemm_hook<float>, &gemm_hook<double>,
};

}  // namespace

const EngineTable* table() { return &kTable; }

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn
