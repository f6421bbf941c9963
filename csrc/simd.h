// Vector types of the instruction set this translation unit is compiled for.
//
// Every kernel source (lstm.cc, gru.cc, rnn.cc, isa_table.cc) is compiled once per ISA with
// FUSEDRNN_ISA (the namespace: avx512, avx2, portable) and FUSEDRNN_VECTOR_BYTES (64, 32, 16)
// defined by CMakeLists.txt.  Everything below lives in that namespace so the three copies never
// meet at link time; the kernels use no inline library templates for the same reason.
#pragma once

#include <cstdint>
#include <cstring>

#if !defined(FUSEDRNN_ISA) || !defined(FUSEDRNN_VECTOR_BYTES)
#error "compile kernel sources through CMakeLists.txt (FUSEDRNN_ISA, FUSEDRNN_VECTOR_BYTES)"
#endif

#if FUSEDRNN_VECTOR_BYTES >= 32
#include <immintrin.h>
#endif

namespace fusedrnn {
namespace FUSEDRNN_ISA {

constexpr int kVectorBytes = FUSEDRNN_VECTOR_BYTES;

template <class T> struct IntOf;
template <> struct IntOf<float> { using type = int32_t; };
template <> struct IntOf<double> { using type = int64_t; };

// GCC/Clang vector extensions: lane-wise IEEE arithmetic; the compiler lowers them to the ISA.
// Bytes: the ISA's full width unless a kernel asks for narrower vectors (dot_columns).
template <class T, int Bytes = kVectorBytes>
struct Vec {
  static constexpr int width = Bytes / int(sizeof(T));
  typedef T type __attribute__((vector_size(Bytes)));
  typedef typename IntOf<T>::type int_type __attribute__((vector_size(Bytes)));
};

template <class T, int Bytes = kVectorBytes> using V = typename Vec<T, Bytes>::type;
template <class T> using VI = typename Vec<T>::int_type;

template <class T, int Bytes = kVectorBytes>
inline V<T, Bytes> load(const T* p) {
  V<T, Bytes> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
inline void store(T* p, V<T> v) {
  std::memcpy(p, &v, sizeof v);
}

// The first n ≤ width values at p (the rest of the lanes 0), and storing only them.
template <class T, int Bytes = kVectorBytes>
inline V<T, Bytes> load_n(const T* p, int64_t n) {
  if (n == Vec<T, Bytes>::width) return load<T, Bytes>(p);
  V<T, Bytes> v = {};
  std::memcpy(&v, p, size_t(n) * sizeof(T));
  return v;
}

template <class T>
inline void store_n(T* p, V<T> v, int64_t n) {
  if (n == Vec<T>::width) return store(p, v);
  std::memcpy(p, &v, size_t(n) * sizeof(T));
}

template <class T>
inline V<T> splat(T s) {
  V<T> zero = {};
  return zero + s;
}

// Every lane = *p (one load that broadcasts, where the ISA has it).
inline V<float> broadcast(const float* p) {
#if FUSEDRNN_VECTOR_BYTES == 64
  return (V<float>)_mm512_set1_ps(*p);
#elif FUSEDRNN_VECTOR_BYTES == 32
  return (V<float>)_mm256_set1_ps(*p);  // not _mm256_broadcast_ss: a may-alias load keeps GCC from holding accumulators in registers
#else
  V<float> v = {*p, *p, *p, *p};
  return v;
#endif
}

inline V<double> broadcast(const double* p) {
#if FUSEDRNN_VECTOR_BYTES == 64
  return (V<double>)_mm512_set1_pd(*p);
#elif FUSEDRNN_VECTOR_BYTES == 32
  return (V<double>)_mm256_set1_pd(*p);
#else
  V<double> v = {*p, *p};
  return v;
#endif
}

// a * b + c: one rounding (FMA) where the ISA has it, else two (the portable path).
inline V<float> fmadd(V<float> a, V<float> b, V<float> c) {
#if FUSEDRNN_VECTOR_BYTES == 64
  return (V<float>)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif FUSEDRNN_VECTOR_BYTES == 32
  return (V<float>)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  return a * b + c;
#endif
}

inline V<double> fmadd(V<double> a, V<double> b, V<double> c) {
#if FUSEDRNN_VECTOR_BYTES == 64
  return (V<double>)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#elif FUSEDRNN_VECTOR_BYTES == 32
  return (V<double>)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
#else
  return a * b + c;
#endif
}

// x > limit ? limit : x lane-wise (NaN stays NaN): one min instruction where the ISA has it
// (x86 min returns its second operand when either is NaN).
inline V<float> min_limit(V<float> x, V<float> limit) {
#if FUSEDRNN_VECTOR_BYTES == 64
  return (V<float>)_mm512_maskz_min_ps(__mmask16(-1), (__m512)limit, (__m512)x);  // maskz: no GCC 12 -Wmaybe-uninitialized
#elif FUSEDRNN_VECTOR_BYTES == 32
  return (V<float>)_mm256_min_ps((__m256)limit, (__m256)x);
#else
  return x > limit ? limit : x;
#endif
}

inline V<double> min_limit(V<double> x, V<double> limit) {
#if FUSEDRNN_VECTOR_BYTES == 64
  return (V<double>)_mm512_maskz_min_pd(__mmask8(-1), (__m512d)limit, (__m512d)x);
#elif FUSEDRNN_VECTOR_BYTES == 32
  return (V<double>)_mm256_min_pd((__m256d)limit, (__m256d)x);
#else
  return x > limit ? limit : x;
#endif
}

#if FUSEDRNN_VECTOR_BYTES == 64
// The AVX-512 copy's 32-byte vectors (dot_columns).
inline V<float, 32> fmadd(V<float, 32> a, V<float, 32> b, V<float, 32> c) {
  return (V<float, 32>)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
}

inline V<double, 32> fmadd(V<double, 32> a, V<double, 32> b, V<double, 32> c) {
  return (V<double, 32>)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
}
#endif

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn
