//===- ShapeExpr.cpp - Symbolic shape guard expressions -------------------===//
#include "guardjit/IR/ShapeExpr.h"

#include <cmath>
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
