// Kernels of the elementwise ops (ir/ops/elementwise.py): binary arithmetic, comparisons and logical
// ops with NumPy broadcasting, unary math, Select. The loops are elementwise_loops.h.
//
// The NumPy interpreter (backends/interpreter/kernels/elementwise.py) is the specification:
// same dtypes, same order of floating-point operations (scalars cast to the data's dtype first),
// integer Divide and FloorDivide are np.floor_divide (x // 0 == 0), integer Mod np.mod (x % 0 == 0),
// float Mod and FloorDivide are Paddle's remainder and floor_divide, integer arithmetic wraps, Maximum/Minimum
// propagate NaN, bool Divide and Power are NumPy's (a or not b).
// exp/log/pow are the C library's, which may differ from NumPy's SIMD versions by an ulp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "pdng/elementwise_loops.h"
#include "pdng/kernel.h"
#include "pdng/kernel_util.h"

namespace pdng {
namespace {

// --- binary functors: operator()(a, b) -> output element ----------------------------------------
struct AddOp {
  static constexpr unsigned kinds = kAll;  // bool: logical or, as np.add
  static constexpr int cost = 1;
  template <class T> T operator()(T a, T b) const { return static_cast<T>(Arith<T>(a) + Arith<T>(b)); }
};
struct SubtractOp {
  static constexpr unsigned kinds = kNumeric;
  static constexpr int cost = 1;
  template <class T> T operator()(T a, T b) const { return static_cast<T>(Arith<T>(a) - Arith<T>(b)); }
};
struct MultiplyOp {
  static constexpr unsigned kinds = kAll;  // bool: logical and
  static constexpr int cost = 1;
  template <class T> T operator()(T a, T b) const { return static_cast<T>(Arith<T>(a) * Arith<T>(b)); }
};
// bool Divide and Power: NumPy computes them in float64 / int8 and casts back: a or not b.
struct DivideOp {
  static constexpr unsigned kinds = kAll;
  static constexpr int cost = 2;
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_same<T, bool>::value) {
      return a || !b;
    } else if constexpr (is_float_v<T>) {
      return a / b;
    } else {
      // np.floor_divide: x // 0 == 0, MIN // -1 == MIN (wraps).
      if (b == 0) return T(0);
      if constexpr (std::is_signed<T>::value) {
        if (b == T(-1)) return static_cast<T>(Arith<T>(0) - Arith<T>(a));
        T q = static_cast<T>(a / b);
        if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
        return q;
      } else {
        return static_cast<T>(a / b);
      }
    }
  }
};
// Integer floor division as np.floor_divide (DivideOp's integer case); floats as Paddle's
// FloorDivideFunctor, which is NumPy's npy_divmod.
struct FloorDivideOp {
  static constexpr unsigned kinds = kNumeric;
  static constexpr int cost = 4;
  template <class T> T operator()(T a, T b) const {
    if constexpr (is_float_v<T>) {
      if (b == 0) return a / b;
      T mod = std::fmod(a, b);
      T div = (a - mod) / b;
      if ((mod != 0) && ((b < 0) != (mod < 0))) div -= T(1);
      if (div == 0) return std::copysign(T(0), a / b);
      T floordiv = std::floor(div);
      if (div - floordiv > T(0.5)) floordiv += T(1);
      return floordiv;
    } else {
      return DivideOp()(a, b);
    }
  }
};
// Paddle's RemainderFunctor: the remainder takes the divisor's sign. Integers: x % 0 == 0 (Paddle
// raises) and MIN % -1 == 0 (C's % would trap), as np.mod.
struct ModOp {
  static constexpr unsigned kinds = kNumeric;
  static constexpr int cost = 4;
  template <class T> T operator()(T a, T b) const {
    if constexpr (is_float_v<T>) {
      T res = std::fmod(a, b);
      if ((res != 0) && ((res < 0) != (b < 0))) res += b;
      return res;
    } else {
      if (b == 0) return T(0);
      if constexpr (std::is_signed<T>::value) {
        if (b == T(-1)) return T(0);
        T res = static_cast<T>(a % b);
        if ((res != 0) && ((res < 0) != (b < 0))) res = static_cast<T>(Arith<T>(res) + Arith<T>(b));
        return res;
      } else {
        return static_cast<T>(a % b);
      }
    }
  }
};
struct MaximumOp {
  static constexpr unsigned kinds = kAll;
  static constexpr int cost = 1;
  template <class T> T operator()(T a, T b) const {
    if constexpr (is_float_v<T>) return (a >= b || a != a) ? a : b;  // NaN propagates
    else return a >= b ? a : b;
  }
};
struct MinimumOp {
  static constexpr unsigned kinds = kAll;
  static constexpr int cost = 1;
  template <class T> T operator()(T a, T b) const {
    if constexpr (is_float_v<T>) return (a <= b || a != a) ? a : b;
    else return a <= b ? a : b;
  }
};
struct PowerOp {
  static constexpr unsigned kinds = kAll;
  static constexpr bool kRejectsNegativeIntegerExponent = true;
  static constexpr int cost = 16;
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_same<T, bool>::value) {
      return a || !b;
    } else if constexpr (is_float_v<T>) {
      return std::pow(a, b);
    } else {
      // Exponentiation by squaring modulo 2^64 (negative exponents are rejected before).
      uint64_t base = static_cast<uint64_t>(static_cast<int64_t>(a)), result = 1;
      uint64_t e = static_cast<uint64_t>(b);
      while (e) {
        if (e & 1) result *= base;
        base *= base;
        e >>= 1;
      }
      return static_cast<T>(result);
    }
  }
};

#define PDNG_COMPARISON(Name, expr)                                     \
  struct Name {                                                         \
    static constexpr unsigned kinds = kAll;                             \
    static constexpr int cost = 1;                                      \
    template <class T> bool operator()(T a, T b) const { return expr; } \
  };
PDNG_COMPARISON(EqualOp, a == b)
PDNG_COMPARISON(NotEqualOp, a != b)
PDNG_COMPARISON(LessOp, a < b)
PDNG_COMPARISON(LessEqualOp, a <= b)
PDNG_COMPARISON(GreaterOp, a > b)
PDNG_COMPARISON(GreaterEqualOp, a >= b)
PDNG_COMPARISON(LogicalAndOp, (a != T(0)) && (b != T(0)))
PDNG_COMPARISON(LogicalOrOp, (a != T(0)) || (b != T(0)))
#undef PDNG_COMPARISON

PDNG_REGISTER_KERNEL("Add", make_binary_with<AddOp>);
PDNG_REGISTER_KERNEL("Subtract", make_binary_with<SubtractOp>);
PDNG_REGISTER_KERNEL("Multiply", make_binary_with<MultiplyOp>);
PDNG_REGISTER_KERNEL("Divide", make_binary_with<DivideOp>);
PDNG_REGISTER_KERNEL("FloorDivide", make_binary_with<FloorDivideOp>);
PDNG_REGISTER_KERNEL("Mod", make_binary_with<ModOp>);
PDNG_REGISTER_KERNEL("Maximum", make_binary_with<MaximumOp>);
PDNG_REGISTER_KERNEL("Minimum", make_binary_with<MinimumOp>);
PDNG_REGISTER_KERNEL("Power", make_binary_with<PowerOp>);
PDNG_REGISTER_KERNEL("Equal", make_binary_with<EqualOp>);
PDNG_REGISTER_KERNEL("NotEqual", make_binary_with<NotEqualOp>);
PDNG_REGISTER_KERNEL("Less", make_binary_with<LessOp>);
PDNG_REGISTER_KERNEL("LessEqual", make_binary_with<LessEqualOp>);
PDNG_REGISTER_KERNEL("Greater", make_binary_with<GreaterOp>);
PDNG_REGISTER_KERNEL("GreaterEqual", make_binary_with<GreaterEqualOp>);
PDNG_REGISTER_KERNEL("LogicalAnd", make_binary_with<LogicalAndOp>);
PDNG_REGISTER_KERNEL("LogicalOr", make_binary_with<LogicalOrOp>);

// --- unary ops: same shape in and out, one flat loop ------------------------------------------------
struct ExpOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 16;
  template <class T> T operator()(T x) const { return std::exp(x); }
};
struct LogOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 16;
  template <class T> T operator()(T x) const { return std::log(x); }
};
struct SqrtOp {
  static constexpr unsigned kinds = kFloat;
  static constexpr int cost = 2;
  template <class T> T operator()(T x) const { return std::sqrt(x); }
};
struct NegativeOp {
  static constexpr unsigned kinds = kNumeric;
  static constexpr int cost = 1;
  template <class T> T operator()(T x) const {
    if constexpr (is_float_v<T>) return -x;
    else return static_cast<T>(Arith<T>(0) - Arith<T>(x));
  }
};
struct AbsOp {
  static constexpr unsigned kinds = kAll;
  static constexpr int cost = 1;
  template <class T> T operator()(T x) const {
    if constexpr (is_float_v<T>) return std::fabs(x);
    else if constexpr (std::is_signed<T>::value) {
      // Branch-free |x| (MIN stays MIN, as in NumPy): (x ^ m) - m with m all ones where x < 0.
      using U = std::make_unsigned_t<T>;
      const U m = static_cast<U>(U(0) - U(x < 0));
      return static_cast<T>(static_cast<U>(static_cast<U>(U(x) ^ m) - m));
    }
    else return x;
  }
};
struct LogicalNotOp {  // output has the input's dtype (the IR's type rule), 1 where x == 0
  static constexpr unsigned kinds = kAll;
  static constexpr int cost = 1;
  template <class T> T operator()(T x) const { return static_cast<T>(x == T(0)); }
};

PDNG_REGISTER_KERNEL("Exp", make_unary_with<ExpOp>);
PDNG_REGISTER_KERNEL("Log", make_unary_with<LogOp>);
PDNG_REGISTER_KERNEL("Sqrt", make_unary_with<SqrtOp>);
PDNG_REGISTER_KERNEL("Negative", make_unary_with<NegativeOp>);
PDNG_REGISTER_KERNEL("Abs", make_unary_with<AbsOp>);
PDNG_REGISTER_KERNEL("LogicalNot", make_unary_with<LogicalNotOp>);

// --- Select, BroadcastTo: moves of whole elements, by element size -----------------------------------
template <size_t N> struct Bits;
template <> struct Bits<1> { using type = uint8_t; };
template <> struct Bits<2> { using type = uint16_t; };
template <> struct Bits<4> { using type = uint32_t; };
template <> struct Bits<8> { using type = uint64_t; };

// c ? x : y without a branch or conditional loads, so that the loops vectorize.
template <class U>
inline U blend(uint8_t c, U x, U y) {
  const U m = static_cast<U>(U(0) - U(c != 0));
  return static_cast<U>((x & m) | (y & static_cast<U>(~m)));
}

template <class U>
void select_fn(const Broadcast& p, const Tensor& c, const Tensor& a, const Tensor& b, Tensor& out) {
  const uint8_t* pc = c.as<uint8_t>();  // bool, read as bytes
  const U* pa = a.as<U>();
  const U* pb = b.as<U>();
  U* po = out.as<U>();
  const int64_t sc = p.istride[0], sa = p.istride[1], sb = p.istride[2];
  p.for_each(1, [&](int64_t oo, const int64_t* off, int64_t n) {
    const uint8_t* __restrict cc = pc + off[0];
    const U* __restrict aa = pa + off[1];
    const U* __restrict bb = pb + off[2];
    U* __restrict o = po + oo;
    if (sc && sa && sb) {
      for (int64_t i = 0; i < n; ++i) o[i] = blend(cc[i], aa[i], bb[i]);
    } else if (sc && sa) {
      const U bv = *bb;
      for (int64_t i = 0; i < n; ++i) o[i] = blend(cc[i], aa[i], bv);
    } else if (sc && sb) {
      const U av = *aa;
      for (int64_t i = 0; i < n; ++i) o[i] = blend(cc[i], av, bb[i]);
    } else if (sc) {
      const U av = *aa, bv = *bb;
      for (int64_t i = 0; i < n; ++i) o[i] = blend(cc[i], av, bv);
    } else {
      const U* __restrict src = *cc ? aa : bb;
      if (*cc ? sa : sb) {
        std::memcpy(o, src, static_cast<size_t>(n) * sizeof(U));
      } else {
        const U v = *src;
        for (int64_t i = 0; i < n; ++i) o[i] = v;
      }
    }
  });
}

class SelectKernel : public Kernel {
 public:
  explicit SelectKernel(const NodeInfo& node)
      : plan_({node.inputs[0].shape, node.inputs[1].shape, node.inputs[2].shape}, node.outputs[0].shape) {
    check_arity(node, 3, 1);
    PDNG_CHECK(node.inputs[0].dtype == DType::Bool, "Select: condition must be bool, got " + node.inputs[0].str());
    PDNG_CHECK(node.inputs[1].dtype == node.inputs[2].dtype && node.outputs[0].dtype == node.inputs[1].dtype,
               "Select: branch dtypes differ: " + node.inputs[1].str() + " and " + node.inputs[2].str());
    switch (dtype_size(node.inputs[1].dtype)) {
      case 1: fn_ = &select_fn<uint8_t>; break;
      case 2: fn_ = &select_fn<uint16_t>; break;
      case 4: fn_ = &select_fn<uint32_t>; break;
      case 8: fn_ = &select_fn<uint64_t>; break;
      default: unsupported(node, node.inputs[1].dtype);
    }
  }
  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    fn_(plan_, in[0], in[1], in[2], out[0]);
  }

 private:
  Broadcast plan_;
  void (*fn_)(const Broadcast&, const Tensor&, const Tensor&, const Tensor&, Tensor&) = nullptr;
};

PDNG_REGISTER_KERNEL("Select", [](const NodeInfo& node) {
  check_arity(node, 3, 1);
  return std::unique_ptr<Kernel>(new SelectKernel(node));
});

}  // namespace
}  // namespace pdng
