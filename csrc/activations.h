// Vectorised tanh (the only transcendental the engines use: σ(z) = (1 + tanh(z/2)) / 2, as in
// the NumPy engines).
//
// tanh(x) = sign(x) · e / (e + 2),  e = expm1(2|x|),  |x| clamped to 20 (float) / 40 (double)
// where tanh rounds to ±1.  expm1(y) = 2^k (p + 1) - 1 with y = k ln2 + r (Cody–Waite,
// |r| ≤ ln2/2) and p = expm1(r) by its Taylor polynomial in Horner form with fused
// multiply-adds (degree 8 float, 14 double; truncation below 4e-9 resp. 3e-19 relative); the
// chain of FMAs keeps the latency short (the gate math is latency-bound).  No cancellation anywhere, so the error is a few ulp over the
// whole range (tests/test_native.py measures it against float64/longdouble: ≤ 4 ulp float32,
// ≤ 8 ulp float64).  NaN propagates (NaN in, NaN out), ±Inf → ±1, -0 → -0, as np.tanh.
#pragma once

#include <type_traits>

#include "simd.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

template <class T> struct TanhConstants;

template <> struct TanhConstants<float> {
  static constexpr float clamp = 20.0f;
  static constexpr float log2e = 1.44269504088896341f;
  static constexpr float shifter = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  static constexpr float ln2_hi = 0.693359375f;
  static constexpr float ln2_lo = -2.12194440e-4f;
  static constexpr int degree = 8;
  static constexpr int mantissa_bits = 23;
  static constexpr int exponent_bias = 127;
};

template <> struct TanhConstants<double> {
  static constexpr double clamp = 40.0;
  static constexpr double log2e = 1.4426950408889634074;
  static constexpr double shifter = 6755399441055744.0;  // 1.5 · 2^52
  static constexpr double ln2_hi = 6.93147180369123816490e-01;
  static constexpr double ln2_lo = 1.90821492927058770002e-10;
  static constexpr int degree = 14;
  static constexpr int mantissa_bits = 52;
  static constexpr int exponent_bias = 1023;
};

template <class T>
constexpr T factorial(int n) {
  T f = 1;
  for (int i = 2; i <= n; ++i) f *= T(i);
  return f;
}

template <class T>
inline V<T> tanh_vec(V<T> x) {
  using C = TanhConstants<T>;
  using I = VI<T>;
  using IS = typename IntOf<T>::type;
  using U = std::make_unsigned_t<IS>;
  typedef U UV __attribute__((vector_size(sizeof(V<T>))));
  I sign_mask = {};
  sign_mask += IS(IS(1) << (8 * sizeof(T) - 1));
  const I sign = (I)x & sign_mask;
  const V<T> a = min_limit((V<T>)((I)x & ~sign_mask), splat<T>(C::clamp));  // NaN stays NaN
  const V<T> y = a + a;
  // shifted = 1.5 · 2^m + k exactly (k = y / ln2 rounded to an integer, 0 ≤ k < 2^(m-1)): its
  // bits are those of 1.5 · 2^m plus k, so 2^k's are (those - 1.5 · 2^m's + bias) << m without a
  // conversion (unsigned: any bits of a NaN's lanes, whose e is NaN whatever 2^k).
  const V<T> shifted = y * C::log2e + C::shifter;
  const V<T> k = shifted - C::shifter;
  const V<T> r = fmadd(k, splat<T>(-C::ln2_lo), fmadd(k, splat<T>(-C::ln2_hi), y));
  // p = expm1(r) = r (1 + r (1/2! + r (1/3! + ...)))
  V<T> p = splat<T>(T(1) / factorial<T>(C::degree));
  for (int n = C::degree - 1; n >= 1; --n) p = fmadd(p, r, splat<T>(T(1) / factorial<T>(n)));
  p = p * r;
  U shifter_bits;
  const T shifter = C::shifter;
  std::memcpy(&shifter_bits, &shifter, sizeof shifter);
  const UV biased = (UV)shifted + U(U(C::exponent_bias) - shifter_bits);  // k + bias, low bits
  const V<T> two_k = (V<T>)(biased << C::mantissa_bits);
  const V<T> e = fmadd(two_k, p, two_k - T(1));
  const V<T> t = e / (e + T(2));
  return (V<T>)((I)t | sign);
}

// out[i] = tanh(in[i]), i < n (in == out allowed).  Every element goes through the same lanes
// of the same code, whatever its position, so a value's result never depends on the slicing.
template <class T>
inline void tanh_array(const T* in, T* out, int64_t n) {
  constexpr int W = Vec<T>::width;
  int64_t i = 0;
  for (; i + W <= n; i += W) store(out + i, tanh_vec<T>(load(in + i)));
  if (i < n) {
    T buffer[W] = {};
    std::memcpy(buffer, in + i, size_t(n - i) * sizeof(T));
    store(buffer, tanh_vec<T>(load(buffer)));
    std::memcpy(out + i, buffer, size_t(n - i) * sizeof(T));
  }
}

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn
