//===- ShapeEval.cpp - Evaluates symbolic shape expressions ---------------===//
//
// Reads the operands of a shape expression from CPython objects; the
// arithmetic itself is evalShapeExprValues (lib/IR/ShapeExpr.cpp). Every
// operand is read first: a read that cannot be exact makes the whole
// expression Unknown before anything is computed (reads have no side
// effects, so this never changes an answer).
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/ShapeEval.h"

#include "guardjit/Runtime/TorchHooks.h"

#include <algorithm>
#include <vector>

using namespace guardjit;

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


ShapeOutcome guardjit::evalShapeExpr(const ShapeExpr &E,
                                     PyObject *const *Operands) {
  // 1. Read every operand the way its read nodes ask.
  thread_local std::vector<ShapeValue> Reads;
  size_t NumOperands = 0;
  for (const ShapeNode &N : E)
    if (N.Op == ShapeOp::ReadInt || N.Op == ShapeOp::ReadFloat)
      NumOperands = std::max<size_t>(NumOperands, N.Int + 1);
  // A lambda fallback cannot run inside this evaluation, so the thread-local
  // buffer is never re-entered.
  Reads.assign(NumOperands, ShapeValue());
  for (const ShapeNode &N : E) {
    if (N.Op == ShapeOp::ReadInt) {
      ShapeValue &R = Reads[N.Int];
      R.T = ShapeType::Int;
      if (!gj_rt_shape_read_int(Operands[N.Int], &R.I))
        return ShapeOutcome::Unknown;
    } else if (N.Op == ShapeOp::ReadFloat) {
      ShapeValue &R = Reads[N.Int];
      R.T = ShapeType::Float;
      if (!gj_rt_shape_read_float(Operands[N.Int], &R.F))
        return ShapeOutcome::Unknown;
    }
  }
  // 2. Evaluate from the root (IR/ShapeExpr.h, shared with Python-free hosts).
  return evalShapeExprValues(E, Reads.data());
}
