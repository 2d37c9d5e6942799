//===- ShapeEval.cpp - Evaluates symbolic shape expressions ---------------===//
//
// A recursive evaluator from the root in Python's evaluation order (left to
// right, `and` / `or` short-circuit), so that a ZeroDivisionError is reported
// exactly where Python would raise it. Every operand is read first: a read
// that cannot be exact makes the whole expression Unknown before anything is
// computed (reads have no side effects, so this never changes an answer).
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/ShapeEval.h"

#include "guardjit/Runtime/TorchHooks.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

using namespace guardjit;

bool guardjit::pyFloorDiv(int64_t A, int64_t B, int64_t *Out,
                          bool *DivByZero) {
  *DivByZero = B == 0;
  if (B == 0)
    return false;
  if (A == std::numeric_limits<int64_t>::min() && B == -1)
    return false; // 2^63 does not fit
  int64_t Q = A / B, R = A % B;
  // C truncates toward zero; Python floors.
  if (R != 0 && ((R < 0) != (B < 0)))
    --Q;
  *Out = Q;
  return true;
}

bool guardjit::pyMod(int64_t A, int64_t B, int64_t *Out, bool *DivByZero) {
  *DivByZero = B == 0;
  if (B == 0)
    return false;
  if (B == -1) { // INT64_MIN % -1 traps in C; Python gives 0 for any A
    *Out = 0;
    return true;
  }
  int64_t R = A % B;
  // Python's result has the sign of B.
  if (R != 0 && ((R < 0) != (B < 0)))
    R += B;
  *Out = R;
  return true;
}

extern "C" int gj_rt_shape_read_int(PyObject *Obj, int64_t *Out) {
  // Exact int or bool only: a subclass may override the operators Python
  // would call. bool is an int in every operator the expressions use.
  if (Py_TYPE(Obj) != &PyLong_Type && Py_TYPE(Obj) != &PyBool_Type)
    return 0;
  int Overflow = 0;
  long long V = PyLong_AsLongLongAndOverflow(Obj, &Overflow);
  if (Overflow != 0)
    return 0;
  if (V == -1 && PyErr_Occurred()) { // cannot happen for an exact int
    PyErr_Clear();
    return 0;
  }
  *Out = V;
  return 1;
}

extern "C" int gj_rt_shape_read_float(PyObject *Obj, double *Out) {
  if (Py_TYPE(Obj) != &PyFloat_Type)
    return 0;
  *Out = PyFloat_AS_DOUBLE(Obj);
  return 1;
}

extern "C" PyObject *gj_rt_tensor_property(PyObject *Obj, int Property,
                                           int64_t Index) {
  const TorchHooks *H = torchHooks();
  if (!H || !H->tensorProperty)
    return nullptr;
  int64_t V;
  if (!H->tensorProperty(Obj, Property, Index, &V))
    return nullptr;
  PyObject *R = PyLong_FromLongLong(V);
  if (!R)
    PyErr_Clear();
  return R;
}

namespace {

enum class Status { Ok, Raise, Unknown };

/// A node's value: the field its static type selects.
struct Num {
  ShapeType T = ShapeType::Int;
  int64_t I = 0;
  double F = 0;
  bool B = false;
};

bool exactAsDouble(int64_t V) {
  return V >= -MaxExactDoubleInt && V <= MaxExactDoubleInt;
}

class Evaluator {
public:
  Evaluator(const ShapeExpr &E, const std::vector<Num> &Reads)
      : E(E), Reads(Reads) {}

  Status eval(size_t I, Num &Out) {
    const ShapeNode &N = E[I];
    switch (N.Op) {
    case ShapeOp::ConstInt:
      Out.T = ShapeType::Int;
      Out.I = N.Int;
      return Status::Ok;
    case ShapeOp::ConstFloat:
      Out.T = ShapeType::Float;
      Out.F = N.Float;
      return Status::Ok;
    case ShapeOp::ReadInt:
    case ShapeOp::ReadFloat:
      Out = Reads[N.Int];
      return Status::Ok;
    case ShapeOp::And:
    case ShapeOp::Or: {
      bool IsAnd = N.Op == ShapeOp::And;
      Out.T = ShapeType::Bool;
      for (uint32_t A : N.Args) {
        Num X;
        if (Status S = eval(A, X); S != Status::Ok)
          return S;
        Out.B = X.B;
        if (X.B != IsAnd) // `and` stops at false, `or` at true
          return Status::Ok;
      }
      return Status::Ok;
    }
    case ShapeOp::Min:
    case ShapeOp::Max: {
      // builtins.min/max: keep the first; replace when x < m (min) / x > m.
      if (Status S = eval(N.Args[0], Out); S != Status::Ok)
        return S;
      for (size_t K = 1; K < N.Args.size(); ++K) {
        Num X;
        if (Status S = eval(N.Args[K], X); S != Status::Ok)
          return S;
        bool Replace = Out.T == ShapeType::Int
                           ? (N.Op == ShapeOp::Min ? X.I < Out.I : X.I > Out.I)
                           : (N.Op == ShapeOp::Min ? X.F < Out.F : X.F > Out.F);
        if (Replace)
          Out = X;
      }
      return Status::Ok;
    }
    default:
      break;
    }
    // Strict operators: evaluate every argument left to right first.
    Num A, B;
    if (Status S = eval(N.Args[0], A); S != Status::Ok)
      return S;
    if (N.Args.size() > 1)
      if (Status S = eval(N.Args[1], B); S != Status::Ok)
        return S;
    return apply(N.Op, A, B, Out);
  }

private:
  static Status apply(ShapeOp Op, const Num &A, const Num &B, Num &Out) {
    bool BothInt = A.T == ShapeType::Int && B.T == ShapeType::Int;
    auto AsF = [](const Num &X) {
      return X.T == ShapeType::Int ? static_cast<double>(X.I) : X.F;
    };
    switch (Op) {
    case ShapeOp::Add:
    case ShapeOp::Sub:
    case ShapeOp::Mul:
      if (BothInt) {
        Out.T = ShapeType::Int;
        bool Ovf = Op == ShapeOp::Add   ? __builtin_add_overflow(A.I, B.I, &Out.I)
                   : Op == ShapeOp::Sub ? __builtin_sub_overflow(A.I, B.I, &Out.I)
                                        : __builtin_mul_overflow(A.I, B.I, &Out.I);
        return Ovf ? Status::Unknown : Status::Ok;
      }
      // int op float: Python converts the int (correctly rounded, as the
      // int64 -> double conversion is) and computes in IEEE double.
      Out.T = ShapeType::Float;
      Out.F = Op == ShapeOp::Add   ? AsF(A) + AsF(B)
              : Op == ShapeOp::Sub ? AsF(A) - AsF(B)
                                   : AsF(A) * AsF(B);
      return Status::Ok;
    case ShapeOp::FloorDiv:
    case ShapeOp::Mod: {
      Out.T = ShapeType::Int;
      bool DivByZero;
      bool Ok = Op == ShapeOp::FloorDiv ? pyFloorDiv(A.I, B.I, &Out.I, &DivByZero)
                                        : pyMod(A.I, B.I, &Out.I, &DivByZero);
      if (DivByZero)
        return Status::Raise;
      return Ok ? Status::Ok : Status::Unknown;
    }
    case ShapeOp::TrueDiv:
      Out.T = ShapeType::Float;
      if (BothInt) {
        // int / int is correctly rounded in Python; so is double division
        // of exactly converted operands.
        if (B.I == 0)
          return Status::Raise;
        if (!exactAsDouble(A.I) || !exactAsDouble(B.I))
          return Status::Unknown;
      } else if (AsF(B) == 0.0) {
        return Status::Raise; // float division by zero raises too
      }
      Out.F = AsF(A) / AsF(B);
      return Status::Ok;
    case ShapeOp::Neg:
      Out.T = A.T;
      if (A.T == ShapeType::Float) {
        Out.F = -A.F;
        return Status::Ok;
      }
      return __builtin_sub_overflow(int64_t(0), A.I, &Out.I) ? Status::Unknown
                                                             : Status::Ok;
    case ShapeOp::Abs:
      Out.T = A.T;
      if (A.T == ShapeType::Float) {
        Out.F = std::fabs(A.F);
        return Status::Ok;
      }
      if (A.I == std::numeric_limits<int64_t>::min())
        return Status::Unknown;
      Out.I = A.I < 0 ? -A.I : A.I;
      return Status::Ok;
    case ShapeOp::ToFloat:
      Out.T = ShapeType::Float;
      Out.F = static_cast<double>(A.I);
      return Status::Ok;
    case ShapeOp::Eq:
    case ShapeOp::Ne:
    case ShapeOp::Lt:
    case ShapeOp::Le:
    case ShapeOp::Gt:
    case ShapeOp::Ge: {
      Out.T = ShapeType::Bool;
      int Cmp; // -1, 0, 1, or 2 for unordered (NaN)
      if (BothInt) {
        Cmp = A.I < B.I ? -1 : A.I > B.I;
      } else {
        // Python compares int and float exactly; doubles do when the int
        // converts exactly.
        if ((A.T == ShapeType::Int && !exactAsDouble(A.I)) ||
            (B.T == ShapeType::Int && !exactAsDouble(B.I)))
          return Status::Unknown;
        double X = AsF(A), Y = AsF(B);
        Cmp = X < Y ? -1 : X > Y ? 1 : X == Y ? 0 : 2;
      }
      switch (Op) {
      case ShapeOp::Eq:
        Out.B = Cmp == 0;
        break;
      case ShapeOp::Ne:
        Out.B = Cmp != 0;
        break;
      case ShapeOp::Lt:
        Out.B = Cmp == -1;
        break;
      case ShapeOp::Le:
        Out.B = Cmp == -1 || Cmp == 0;
        break;
      case ShapeOp::Gt:
        Out.B = Cmp == 1;
        break;
      default:
        Out.B = Cmp == 1 || Cmp == 0;
        break;
      }
      return Status::Ok;
    }
    case ShapeOp::Not:
      Out.T = ShapeType::Bool;
      Out.B = !A.B;
      return Status::Ok;
    case ShapeOp::IsNan:
      Out.T = ShapeType::Bool;
      Out.B = std::isnan(A.F);
      return Status::Ok;
    default:
      return Status::Unknown; // leaves and n-ary ops are handled by eval
    }
  }

  const ShapeExpr &E;
  const std::vector<Num> &Reads;
};

} // namespace

ShapeOutcome guardjit::evalShapeExpr(const ShapeExpr &E,
                                     PyObject *const *Operands) {
  // 1. Read every operand the way its read nodes ask.
  thread_local std::vector<Num> Reads;
  size_t NumOperands = 0;
  for (const ShapeNode &N : E)
    if (N.Op == ShapeOp::ReadInt || N.Op == ShapeOp::ReadFloat)
      NumOperands = std::max<size_t>(NumOperands, N.Int + 1);
  // A lambda fallback cannot run inside this evaluation, so the thread-local
  // buffer is never re-entered.
  Reads.assign(NumOperands, Num());
  for (const ShapeNode &N : E) {
    if (N.Op == ShapeOp::ReadInt) {
      Num &R = Reads[N.Int];
      R.T = ShapeType::Int;
      if (!gj_rt_shape_read_int(Operands[N.Int], &R.I))
        return ShapeOutcome::Unknown;
    } else if (N.Op == ShapeOp::ReadFloat) {
      Num &R = Reads[N.Int];
      R.T = ShapeType::Float;
      if (!gj_rt_shape_read_float(Operands[N.Int], &R.F))
        return ShapeOutcome::Unknown;
    }
  }
  // 2. Evaluate from the root.
  Num Root;
  switch (Evaluator(E, Reads).eval(E.size() - 1, Root)) {
  case Status::Ok:
    return Root.B ? ShapeOutcome::Pass : ShapeOutcome::Fail;
  case Status::Raise:
    return ShapeOutcome::Fail;
  case Status::Unknown:
    return ShapeOutcome::Unknown;
  }
  return ShapeOutcome::Unknown;
}
