#pragma once
// The element-wise operations, one struct each: its forward formula and its
// backward (dL/dx from dL/dy and the value the derivative is taken at), as
// templates that one definition serves on both devices:
//   - the CPU passes (elementwise.cpp) give them Eigen arrays (maps of whole
//     tensors), so a formula is one vectorised Eigen expression;
//   - the CUDA kernels (elementwise.cu) give them one element (f32, or f64),
//     loaded by the grid-stride loop.
// A formula uses the arithmetic operators, comparisons and the functions of
// namespace math below (exp, tanh, erf, abs, square, maximum, select), which
// have an overload for each. A new op is a struct with its number of inputs
// and its formulas (below), an alternative of Op, and its registration in
// elementwise.cpp (after Caffe's NeuronLayer and ggml's unary ops).
#include <cmath>
#include <type_traits>
#include <variant>

#ifndef __CUDACC__
#include <Eigen/Core>
#endif

#ifdef __CUDACC__
#define PLEXUS_ELEMENTWISE_FUNCTION __host__ __device__ inline
#else
#define PLEXUS_ELEMENTWISE_FUNCTION inline
#endif

namespace plexus::layers::elementwise {

// The element type: X itself for one element, X::Scalar for an Eigen array.
template <typename X, typename = void>
struct ScalarOfImpl {
  using type = X;
};
template <typename X>
struct ScalarOfImpl<X, std::void_t<typename X::Scalar>> {
  using type = typename X::Scalar;
};
template <typename X>
using ScalarOf = typename ScalarOfImpl<X>::type;

// The functions a formula may call, as math::exp(x) etc.: one overload for
// one element, one for an Eigen array. Formulas call them qualified, so that
// overload resolution sees exactly these (no argument-dependent lookup).
namespace math {

// One element (the CUDA kernels): the C library's functions of its type.
PLEXUS_ELEMENTWISE_FUNCTION float exp(float v) { return ::expf(v); }
PLEXUS_ELEMENTWISE_FUNCTION double exp(double v) { return ::exp(v); }
PLEXUS_ELEMENTWISE_FUNCTION float tanh(float v) { return ::tanhf(v); }
PLEXUS_ELEMENTWISE_FUNCTION double tanh(double v) { return ::tanh(v); }
PLEXUS_ELEMENTWISE_FUNCTION float erf(float v) { return ::erff(v); }
PLEXUS_ELEMENTWISE_FUNCTION double erf(double v) { return ::erf(v); }
PLEXUS_ELEMENTWISE_FUNCTION float abs(float v) { return ::fabsf(v); }
PLEXUS_ELEMENTWISE_FUNCTION double abs(double v) { return ::fabs(v); }
template <typename T, typename = std::enable_if_t<std::is_floating_point_v<T>>>
PLEXUS_ELEMENTWISE_FUNCTION T square(T v) {
  return v * v;
}
// a for a > b, else b (so maximum(-0, 0) is +0, and maximum(NaN, 0) is 0).
template <typename T, typename = std::enable_if_t<std::is_floating_point_v<T>>>
PLEXUS_ELEMENTWISE_FUNCTION T maximum(T a, T b) {
  return a > b ? a : b;
}
template <typename T>
PLEXUS_ELEMENTWISE_FUNCTION T select(bool condition, T if_true, T if_false) {
  return condition ? if_true : if_false;
}

#ifndef __CUDACC__
// Eigen arrays (the CPU passes): Eigen's own element-wise functions, and
// erf through the C library (Eigen's needs its unsupported module). maximum
// is Eigen's max, whose -0 and NaN cases are the vector unit's.
using Eigen::abs;
using Eigen::exp;
using Eigen::square;
using Eigen::tanh;
template <typename X>
auto erf(const Eigen::ArrayBase<X>& x) {
  return x.unaryExpr([](typename X::Scalar v) { return std::erf(v); });
}
template <typename X>
auto maximum(const Eigen::ArrayBase<X>& x, typename X::Scalar bound) {
  return x.max(bound);
}
// if_true and if_false: arrays or a scalar.
template <typename Condition, typename IfTrue, typename IfFalse>
auto select(const Eigen::ArrayBase<Condition>& condition, const IfTrue& if_true, const IfFalse& if_false) {
  return condition.select(if_true, if_false);
}
#endif

}  // namespace math

// ---- Unary (inputs = 1): y = f(x) ----
// backward(v, dy) = dL/dx, with v = x, or v = y where backward_reads_output
// (the derivative is cheaper from the output, which the net keeps anyway).

// ReLU: y = max(x, 0);  dL/dx = dL/dy [x > 0].
struct ReLU {
  static constexpr int inputs = 1;
  static constexpr bool backward_reads_output = false;
  template <typename X>
  PLEXUS_ELEMENTWISE_FUNCTION auto forward(const X& x) const {
    return math::maximum(x, ScalarOf<X>(0));
  }
  template <typename X, typename G>
  PLEXUS_ELEMENTWISE_FUNCTION auto backward(const X& x, const G& dy) const {
    using T = ScalarOf<X>;
    return math::select(x > T(0), dy, T(0));
  }
};

// LeakyReLU: y = x for x > 0, negative_slope * x otherwise;
// dL/dx = dL/dy for x > 0, negative_slope * dL/dy otherwise.
struct LeakyReLU {
  static constexpr int inputs = 1;
  static constexpr bool backward_reads_output = false;
  double negative_slope = 0.01;
  template <typename X>
  PLEXUS_ELEMENTWISE_FUNCTION auto forward(const X& x) const {
    using T = ScalarOf<X>;
    return math::select(x > T(0), x, T(negative_slope) * x);
  }
  template <typename X, typename G>
  PLEXUS_ELEMENTWISE_FUNCTION auto backward(const X& x, const G& dy) const {
    using T = ScalarOf<X>;
    return math::select(x > T(0), dy, T(negative_slope) * dy);
  }
};

// Abs: y = |x|;  dL/dx = dL/dy sign(x), with sign(0) = 0 (the subgradient
// PyTorch's abs uses). The hyper-analysis of the scale hyperprior starts
// with it (Ballé et al. 2018: the scales depend only on the magnitudes).
struct Abs {
  static constexpr int inputs = 1;
  static constexpr bool backward_reads_output = false;
  template <typename X>
  PLEXUS_ELEMENTWISE_FUNCTION auto forward(const X& x) const {
    return math::abs(x);
  }
  template <typename X, typename G>
  PLEXUS_ELEMENTWISE_FUNCTION auto backward(const X& x, const G& dy) const {
    using T = ScalarOf<X>;
    return math::select(x > T(0), dy, math::select(x < T(0), -dy, T(0)));
  }
};

// Sigmoid: y = 1 / (1 + exp(-x));  dL/dx = dL/dy y (1 - y). No branch is
// needed for stability: exp(-x) overflows to +inf for very negative x, and
// 1 / inf = 0 is the right limit.
struct Sigmoid {
  static constexpr int inputs = 1;
  static constexpr bool backward_reads_output = true;
  template <typename X>
  PLEXUS_ELEMENTWISE_FUNCTION auto forward(const X& x) const {
    using T = ScalarOf<X>;
    return T(1) / (T(1) + math::exp(-x));
  }
  template <typename Y, typename G>
  PLEXUS_ELEMENTWISE_FUNCTION auto backward(const Y& y, const G& dy) const {
    using T = ScalarOf<Y>;
    return dy * y * (T(1) - y);
  }
};

// Tanh: y = scale tanh(x);  dL/dx = dL/dy scale (1 - (y / scale)^2), with
// tanh(x) = y / scale. Minnen & Singh's latent residual prediction adds
// 0.5 tanh of a small network's output to the latent.
struct Tanh {
  static constexpr int inputs = 1;
  static constexpr bool backward_reads_output = true;
  double scale = 1.0;
  template <typename X>
  PLEXUS_ELEMENTWISE_FUNCTION auto forward(const X& x) const {
    using T = ScalarOf<X>;
    return T(scale) * math::tanh(x);
  }
  template <typename Y, typename G>
  PLEXUS_ELEMENTWISE_FUNCTION auto backward(const Y& y, const G& dy) const {
    using T = ScalarOf<Y>;
    return dy * T(scale) * (T(1) - math::square(y / T(scale)));
  }
};

// GELU (Hendrycks & Gimpel 2016), exact: y = x Phi(x), with the standard
// normal's distribution Phi(x) = (1 + erf(x / sqrt 2)) / 2 and density
// phi(x) = exp(-x^2 / 2) / sqrt(2 pi);  dL/dx = dL/dy (Phi(x) + x phi(x)).
// As PyTorch's GELU (approximate "none").
struct GELU {
  static constexpr int inputs = 1;
  static constexpr bool backward_reads_output = false;
  static constexpr double kSqrtHalf = 0.70710678118654752440;          // 1 / sqrt 2
  static constexpr double kInverseSqrtTwoPi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
  template <typename X>
  PLEXUS_ELEMENTWISE_FUNCTION auto forward(const X& x) const {
    using T = ScalarOf<X>;
    return x * T(0.5) * (T(1) + math::erf(x * T(kSqrtHalf)));
  }
  template <typename X, typename G>
  PLEXUS_ELEMENTWISE_FUNCTION auto backward(const X& x, const G& dy) const {
    using T = ScalarOf<X>;
    return dy * (T(0.5) * (T(1) + math::erf(x * T(kSqrtHalf))) +
                 x * T(kInverseSqrtTwoPi) * math::exp(T(-0.5) * math::square(x)));
  }
};

// GELU with PyTorch's approximate "tanh": y = x (1 + tanh(u)) / 2, with
// u = sqrt(2 / pi) (x + 0.044715 x^3);
// dL/dx = dL/dy ((1 + tanh u) / 2 + x (1 - tanh^2 u) sqrt(2 / pi) (1 + 3 * 0.044715 x^2) / 2).
struct GELUTanh {
  static constexpr int inputs = 1;
  static constexpr bool backward_reads_output = false;
  static constexpr double kSqrtTwoOverPi = 0.79788456080286535588;
  static constexpr double kCubic = 0.044715;
  template <typename X>
  PLEXUS_ELEMENTWISE_FUNCTION auto forward(const X& x) const {
    using T = ScalarOf<X>;
    return T(0.5) * x * (T(1) + math::tanh(T(kSqrtTwoOverPi) * (x + T(kCubic) * x * x * x)));
  }
  template <typename X, typename G>
  PLEXUS_ELEMENTWISE_FUNCTION auto backward(const X& x, const G& dy) const {
    using T = ScalarOf<X>;
    const auto t = math::tanh(T(kSqrtTwoOverPi) * (x + T(kCubic) * x * x * x));
    return dy * (T(0.5) * (T(1) + t) +
                 T(0.5) * x * (T(1) - math::square(t)) * T(kSqrtTwoOverPi) * (T(1) + T(3 * kCubic) * math::square(x)));
  }
};

// ---- Binary (inputs = 2): y = f(a, b) ----
// grad_a and grad_b: dL/da and dL/db from a, b and dL/dy.

// Mul: y = a b;  dL/da = dL/dy b,  dL/db = dL/dy a. Gating (attention masks,
// as in Cheng et al. 2020's attention module: x * sigmoid(mask)).
struct Mul {
  static constexpr int inputs = 2;
  template <typename A, typename B>
  PLEXUS_ELEMENTWISE_FUNCTION auto forward(const A& a, const B& b) const {
    return a * b;
  }
  template <typename A, typename B, typename G>
  PLEXUS_ELEMENTWISE_FUNCTION auto grad_a(const A&, const B& b, const G& dy) const {
    return dy * b;
  }
  template <typename A, typename B, typename G>
  PLEXUS_ELEMENTWISE_FUNCTION auto grad_b(const A& a, const B&, const G& dy) const {
    return dy * a;
  }
};

// The table: one alternative per formula (a layer type may pick one of
// several by its params, as GELU does).
using Op = std::variant<ReLU, LeakyReLU, Abs, Sigmoid, Tanh, GELU, GELUTanh, Mul>;

// Whether an op (or a reference to one) has one input.
template <typename OpType>
inline constexpr bool is_unary = std::decay_t<OpType>::inputs == 1;

}  // namespace plexus::layers::elementwise
