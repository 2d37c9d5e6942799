//===- ShapeExpr.cpp - Symbolic shape guard expressions -------------------===//
#include "guardjit/IR/ShapeExpr.h"

#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace guardjit {

std::string_view spelling(ShapeOp Op) {
  switch (Op) {
#define GJ_SHAPE_OP(Enum, Spelling, MinArgs, MaxArgs)                          \
  case ShapeOp::Enum:                                                          \
    return Spelling;
#include "guardjit/IR/ShapeExprOps.def"
  }
  return "<invalid-shape-op>";
}

std::optional<ShapeOp> parseShapeOp(std::string_view S) {
#define GJ_SHAPE_OP(Enum, Spelling, MinArgs, MaxArgs)                          \
  if (S == Spelling)                                                           \
    return ShapeOp::Enum;
#include "guardjit/IR/ShapeExprOps.def"
  return std::nullopt;
}

int minArgs(ShapeOp Op) {
  switch (Op) {
#define GJ_SHAPE_OP(Enum, Spelling, MinArgs, MaxArgs)                          \
  case ShapeOp::Enum:                                                          \
    return MinArgs;
#include "guardjit/IR/ShapeExprOps.def"
  }
  return 0;
}

int maxArgs(ShapeOp Op) {
  switch (Op) {
#define GJ_SHAPE_OP(Enum, Spelling, MinArgs, MaxArgs)                          \
  case ShapeOp::Enum:                                                          \
    return MaxArgs;
#include "guardjit/IR/ShapeExprOps.def"
  }
  return 0;
}

std::string_view spelling(ShapeType T) {
  switch (T) {
  case ShapeType::Int:
    return "int";
  case ShapeType::Float:
    return "float";
  case ShapeType::Bool:
    return "bool";
  }
  return "<invalid-type>";
}

bool ShapeNode::operator==(const ShapeNode &O) const {
  // Float constants compare by bits: NaN == NaN for IR equality.
  return Op == O.Op && Int == O.Int &&
         std::memcmp(&Float, &O.Float, sizeof(double)) == 0 && Args == O.Args;
}

static bool isNumber(ShapeType T) {
  return T == ShapeType::Int || T == ShapeType::Float;
}

std::string inferShapeExprTypes(const ShapeExpr &E, size_t NumOperands,
                                std::vector<ShapeType> &Types,
                                size_t *BadNode) {
  Types.assign(E.size(), ShapeType::Int);
  auto Fail = [&](size_t I, std::string Msg) {
    if (BadNode)
      *BadNode = I;
    return Msg;
  };
  if (E.empty())
    return Fail(0, "empty shape expression");
  std::vector<uint8_t> Uses(E.size(), 0);
  // Per operand: 0 unread, 1 read as int, 2 read as float.
  std::vector<uint8_t> Read(NumOperands, 0);
  for (size_t I = 0; I < E.size(); ++I) {
    const ShapeNode &N = E[I];
    std::string Name(spelling(N.Op));
    int Min = minArgs(N.Op), Max = maxArgs(N.Op);
    int Count = static_cast<int>(N.Args.size());
    if (Count < Min || (Max >= 0 && Count > Max)) {
      std::string Want = Min == Max ? std::to_string(Min)
                                    : "at least " + std::to_string(Min);
      return Fail(I, "'" + Name + "' takes " + Want + " argument" +
                         (Min == 1 && Max == 1 ? "" : "s") + ", not " +
                         std::to_string(Count));
    }
    for (uint32_t A : N.Args) {
      if (A >= I)
        return Fail(I, "argument node " + std::to_string(A) + " of node " +
                           std::to_string(I) + " does not precede it");
      if (++Uses[A] > 1)
        return Fail(I, "node " + std::to_string(A) + " is used twice");
    }
    auto Arg = [&](size_t K) { return Types[N.Args[K]]; };
    auto AllArgs = [&](ShapeType T) {
      for (uint32_t A : N.Args)
        if (Types[A] != T)
          return false;
      return true;
    };
    ShapeType &T = Types[I];
    switch (N.Op) {
    case ShapeOp::ConstInt:
      T = ShapeType::Int;
      break;
    case ShapeOp::ConstFloat:
      T = ShapeType::Float;
      break;
    case ShapeOp::ReadInt:
    case ShapeOp::ReadFloat:
      if (N.Int < 0 || static_cast<uint64_t>(N.Int) >= NumOperands)
        return Fail(I, "operand $" + std::to_string(N.Int) +
                           " is out of range (the guard has " +
                           std::to_string(NumOperands) + " operands)");
      T = N.Op == ShapeOp::ReadInt ? ShapeType::Int : ShapeType::Float;
      if (Read[N.Int] != 0 && Read[N.Int] != (T == ShapeType::Int ? 1 : 2))
        return Fail(I, "operand $" + std::to_string(N.Int) +
                           " is read both as int and as float");
      Read[N.Int] = T == ShapeType::Int ? 1 : 2;
      break;
    case ShapeOp::Add:
    case ShapeOp::Sub:
    case ShapeOp::Mul:
      if (!isNumber(Arg(0)) || !isNumber(Arg(1)))
        return Fail(I, "'" + Name + "' needs int or float arguments");
      T = AllArgs(ShapeType::Int) ? ShapeType::Int : ShapeType::Float;
      break;
    case ShapeOp::FloorDiv:
    case ShapeOp::Mod:
      if (!AllArgs(ShapeType::Int))
        return Fail(I, "'" + Name + "' needs int arguments");
      T = ShapeType::Int;
      break;
    case ShapeOp::TrueDiv:
      if (!isNumber(Arg(0)) || !isNumber(Arg(1)))
        return Fail(I, "'" + Name + "' needs int or float arguments");
      T = ShapeType::Float;
      break;
    case ShapeOp::Neg:
    case ShapeOp::Abs:
      if (!isNumber(Arg(0)))
        return Fail(I, "'" + Name + "' needs an int or float argument");
      T = Arg(0);
      break;
    case ShapeOp::Min:
    case ShapeOp::Max:
      if (!AllArgs(ShapeType::Int) && !AllArgs(ShapeType::Float))
        return Fail(I, "'" + Name + "' needs all int or all float arguments");
      T = Arg(0);
      break;
    case ShapeOp::ToFloat:
      if (Arg(0) != ShapeType::Int)
        return Fail(I, "'" + Name + "' needs an int argument");
      T = ShapeType::Float;
      break;
    case ShapeOp::Eq:
    case ShapeOp::Ne:
    case ShapeOp::Lt:
    case ShapeOp::Le:
    case ShapeOp::Gt:
    case ShapeOp::Ge:
      if (!isNumber(Arg(0)) || !isNumber(Arg(1)))
        return Fail(I, "'" + Name + "' needs int or float arguments");
      T = ShapeType::Bool;
      break;
    case ShapeOp::And:
    case ShapeOp::Or:
    case ShapeOp::Not:
      if (!AllArgs(ShapeType::Bool))
        return Fail(I, "'" + Name + "' needs bool arguments");
      T = ShapeType::Bool;
      break;
    case ShapeOp::IsNan:
      if (Arg(0) != ShapeType::Float)
        return Fail(I, "'" + Name + "' needs a float argument");
      T = ShapeType::Bool;
      break;
    }
  }
  for (size_t I = 0; I + 1 < E.size(); ++I)
    if (Uses[I] == 0)
      return Fail(I, "node " + std::to_string(I) +
                         " is not used (the root must be the last node)");
  if (Types.back() != ShapeType::Bool)
    return Fail(E.size() - 1, "a shape expression must be bool, not " +
                                  std::string(spelling(Types.back())));
  for (size_t K = 0; K < NumOperands; ++K)
    if (!Read[K])
      return Fail(E.size() - 1,
                  "operand $" + std::to_string(K) + " is never read");
  return std::string();
}

std::string printShapeFloat(double D) {
  if (std::isnan(D))
    return "nan";
  if (std::isinf(D))
    return D > 0 ? "inf" : "-inf";
  // The shortest of %.15g..%.17g that reads back as the same double.
  char Buf[40];
  for (int Digits = 15; Digits <= 17; ++Digits) {
    std::snprintf(Buf, sizeof(Buf), "%.*g", Digits, D);
    if (std::strtod(Buf, nullptr) == D)
      break;
  }
  std::string S = Buf;
  if (S.find_first_of(".e") == std::string::npos)
    S += ".0";
  return S;
}

static void printNode(std::string &Out, const ShapeExpr &E, size_t I) {
  const ShapeNode &N = E[I];
  switch (N.Op) {
  case ShapeOp::ConstInt:
    Out += std::to_string(N.Int);
    return;
  case ShapeOp::ConstFloat:
    Out += printShapeFloat(N.Float);
    return;
  case ShapeOp::ReadInt:
  case ShapeOp::ReadFloat:
    Out += '(';
    Out += spelling(N.Op);
    Out += " $" + std::to_string(N.Int) + ")";
    return;
  default:
    break;
  }
  Out += '(';
  Out += spelling(N.Op);
  for (uint32_t A : N.Args) {
    Out += ' ';
    if (A < I)
      printNode(Out, E, A);
    else
      Out += "<bad-node-" + std::to_string(A) + ">";
  }
  Out += ')';
}

std::string printShapeExpr(const ShapeExpr &E) {
  std::string Out;
  if (E.empty())
    return "()";
  printNode(Out, E, E.size() - 1);
  return Out;
}

} // namespace guardjit

//===----------------------------------------------------------------------===//
// Evaluation over int64 / double operand values
//===----------------------------------------------------------------------===//
//
// A recursive evaluator from the root in Python's evaluation order (left to
// right, `and` / `or` short-circuit), so that a ZeroDivisionError is reported
// exactly where Python would raise it. Shared by the interpreter (operands
// read from CPython objects, Runtime/ShapeEval.cpp) and Python-free hosts
// (operands read from DLPack tensors, lib/Portable).

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


namespace {

enum class Status { Ok, Raise, Unknown };


bool exactAsDouble(int64_t V) {
  return V >= -MaxExactDoubleInt && V <= MaxExactDoubleInt;
}

class Evaluator {
public:
  Evaluator(const ShapeExpr &E, const ShapeValue *Reads)
      : E(E), Reads(Reads) {}

  Status eval(size_t I, ShapeValue &Out) {
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
        ShapeValue X;
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
        ShapeValue X;
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
    ShapeValue A, B;
    if (Status S = eval(N.Args[0], A); S != Status::Ok)
      return S;
    if (N.Args.size() > 1)
      if (Status S = eval(N.Args[1], B); S != Status::Ok)
        return S;
    return apply(N.Op, A, B, Out);
  }

private:
  static Status apply(ShapeOp Op, const ShapeValue &A, const ShapeValue &B, ShapeValue &Out) {
    bool BothInt = A.T == ShapeType::Int && B.T == ShapeType::Int;
    auto AsF = [](const ShapeValue &X) {
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
  const ShapeValue *Reads;
};

} // namespace

ShapeOutcome guardjit::evalShapeExprValues(const ShapeExpr &E,
                                           const ShapeValue *Reads) {
  ShapeValue Root;
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
