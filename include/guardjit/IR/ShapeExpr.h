//===- ShapeExpr.h - Symbolic shape guard expressions -----------*- C++ -*-===//
//
// The expression of a `shape_expr` guard: one of Dynamo's SHAPE_ENV code
// parts (e.g. `L['x'].size()[0] == L['y'].size()[0]`) as a tree of integer,
// float and boolean operators over the guard's operand values, evaluated
// without Python by the interpreter (Runtime/ShapeEval.h) and the JIT.
//
// Representation: a guard owns its expression as nodes in post-order (every
// argument precedes its user, the root is the last node, every other node is
// the argument of exactly one node), so the tree prints and parses back to
// the same node vector. `(int $i)` / `(float $i)` read the guard's i-th
// operand. Types are inferred (no annotations): see inferShapeExprTypes.
//
// Semantics (docs/guard-semantics.md): Python's, exactly. Where int64 / double
// arithmetic could differ from Python's (overflow, a non-exact int or float
// operand, int/float comparisons beyond 2^53) the result is "unknown" and the
// guard calls its Python fallback (object=#K) or fails.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_IR_SHAPEEXPR_H
#define GUARDJIT_IR_SHAPEEXPR_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace guardjit {

enum class ShapeOp : uint8_t {
#define GJ_SHAPE_OP(Enum, Spelling, MinArgs, MaxArgs) Enum,
#include "guardjit/IR/ShapeExprOps.def"
};

/// "floordiv", "int", ...
std::string_view spelling(ShapeOp Op);
std::optional<ShapeOp> parseShapeOp(std::string_view S);
/// Argument count bounds of `Op`; max -1 means unbounded.
int minArgs(ShapeOp Op);
int maxArgs(ShapeOp Op);

/// The static type of a node's result.
enum class ShapeType : uint8_t { Int, Float, Bool };
std::string_view spelling(ShapeType T);

/// One node of a shape expression.
struct ShapeNode {
  ShapeOp Op = ShapeOp::ConstInt;
  /// ConstInt: the value. ReadInt / ReadFloat: the operand index.
  int64_t Int = 0;
  /// ConstFloat: the value.
  double Float = 0;
  /// Indices of the argument nodes (all smaller than this node's index).
  std::vector<uint32_t> Args;

  bool operator==(const ShapeNode &O) const;
};

using ShapeExpr = std::vector<ShapeNode>;

/// Type-checks `E` for a guard with `NumOperands` operands. On success fills
/// `Types` (one per node) and returns an empty string; otherwise returns the
/// first problem (lower case, no period) and sets *BadNode to the node at
/// fault. Checks: structure (post-order tree, arities, operand indices), that
/// every operand is read, and the typing rules of ShapeExprOps.def (the root
/// must be bool).
std::string inferShapeExprTypes(const ShapeExpr &E, size_t NumOperands,
                                std::vector<ShapeType> &Types,
                                size_t *BadNode = nullptr);

/// The outcome of evaluating a shape expression.
enum class ShapeOutcome : int {
  /// Python would evaluate the code part to a false value or raise
  /// (ZeroDivisionError): the guard fails.
  Fail = 0,
  /// Python would evaluate it to a true value: the guard passes.
  Pass = 1,
  /// int64 / double cannot tell: an operand is not an exact int / float or
  /// does not fit int64, an int operation overflowed, or an int / float
  /// comparison or int / int division involves a magnitude above 2^53. The
  /// guard then asks its Python fallback, or fails if it has none.
  Unknown = 2,
};

/// A node's value (or an operand read): the field its static type selects.
struct ShapeValue {
  ShapeType T = ShapeType::Int;
  int64_t I = 0;
  double F = 0;
  bool B = false;
};

/// Evaluates `E` (which passed inferShapeExprTypes) with Python's semantics
/// over operand values already read: `Reads[i]` is operand i, typed as the
/// expression reads it (Int for `(int $i)`, Float for `(float $i)`). No
/// Python: the interpreter (Runtime/ShapeEval.h) and Python-free hosts
/// (lib/Portable) share it.
ShapeOutcome evalShapeExprValues(const ShapeExpr &E, const ShapeValue *Reads);

/// Python semantics on int64, shared with the JIT's tests: false on
/// overflow (*Out unchanged), and for floorDiv / mod, `*DivByZero` set when
/// `B` is 0 (Python raises ZeroDivisionError).
bool pyFloorDiv(int64_t A, int64_t B, int64_t *Out, bool *DivByZero);
bool pyMod(int64_t A, int64_t B, int64_t *Out, bool *DivByZero);

/// Largest magnitude an int64 can have and still convert to double exactly
/// (2^53): int / float comparisons and int / int true division are exact on
/// doubles up to it.
constexpr int64_t MaxExactDoubleInt = int64_t(1) << 53;

/// The .gir spelling of `E`, e.g. `(le 2 (int $0))`.
std::string printShapeExpr(const ShapeExpr &E);
/// A float constant as the printer writes it: the shortest of `%.15g`,
/// `%.16g`, `%.17g` that reads back as the same double, with a '.' or an
/// exponent (so it lexes as a float), or `inf`, `-inf`, `nan`.
std::string printShapeFloat(double D);

} // namespace guardjit

#endif // GUARDJIT_IR_SHAPEEXPR_H
