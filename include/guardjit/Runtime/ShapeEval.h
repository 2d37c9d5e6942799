//===- ShapeEval.h - Evaluates symbolic shape expressions -------*- C++ -*-===//
//
// The reference semantics of a `shape_expr` guard's expression (IR/ShapeExpr.h)
// over live operand objects: Python's, on exact ints and floats, with int64 /
// double arithmetic where it gives Python's answer, and "unknown" where it
// might not. The JIT lowers the same rules to LLVM IR (lib/JIT/Lowering.cpp)
// and must agree on every input.
//
// No Python code runs here: operands are read with exact-type tests
// (`int`/`bool` via PyLong_AsLongLongAndOverflow, `float` via
// PyFloat_AS_DOUBLE). GIL held.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_RUNTIME_SHAPEEVAL_H
#define GUARDJIT_RUNTIME_SHAPEEVAL_H

#include "guardjit/IR/ShapeExpr.h"
#include "guardjit/Runtime/Python.h"

#include <cstdint>

namespace guardjit {

/// Evaluates `E` over `Operands` (borrowed, one per guard operand; `E` must
/// have passed inferShapeExprTypes for that many operands).
ShapeOutcome evalShapeExpr(const ShapeExpr &E, PyObject *const *Operands);

// ShapeOutcome, pyFloorDiv, pyMod and MaxExactDoubleInt: IR/ShapeExpr.h.

} // namespace guardjit

extern "C" {
/// Reads an exact `int` (or `bool`) that fits int64 into *Out: 1 on success,
/// 0 otherwise (any other type, a subclass, or a larger magnitude). Never
/// leaves an error set.
int gj_rt_shape_read_int(PyObject *Obj, int64_t *Out);
/// Reads an exact `float` into *Out: 1 on success, 0 for any other type.
int gj_rt_shape_read_float(PyObject *Obj, double *Out);
/// TensorPropertyGuardAccessor: tensor.size(Index) (Property 0),
/// .stride(Index) (1) or .storage_offset() (2) of a tensor `Obj` (borrowed)
/// as a NEW reference to an int, or NULL (not a tensor, Index >= dim, a
/// symbolic value, or no TorchHooks installed). Through TorchHooks.
PyObject *gj_rt_tensor_property(PyObject *Obj, int Property, int64_t Index);
} // extern "C"

#endif // GUARDJIT_RUNTIME_SHAPEEVAL_H
