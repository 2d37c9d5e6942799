//===- Interpreter.h - Reference evaluator of Guard IR ----------*- C++ -*-===//
//
// The interpreter defines what a guard set means: it evaluates the IR over
// live CPython objects with torch 2.13 Dynamo's semantics
// (RootGuardManager::check_nopybind). The JIT must agree with it on every
// input. See docs/guard-semantics.md.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_RUNTIME_INTERPRETER_H
#define GUARDJIT_RUNTIME_INTERPRETER_H

#include "guardjit/Runtime/BoundGuardSet.h"

namespace guardjit {

/// Signature of every check function, interpreted or native:
/// `FrameLocals` is the call's frame locals dict (borrowed). Returns 1 when
/// every guard passes, 0 otherwise; never raises (errors are cleared).
/// Requires the GIL.
using CheckFn = int (*)(PyObject *FrameLocals);

/// Evaluates `Set` over `FrameLocals` (borrowed dict). GIL held.
bool interpret(const BoundGuardSet &Set, PyObject *FrameLocals);

/// Where an interpreted check failed: the first failing guard in IR order
/// (`describeGuard`), or the value whose read failed with no guard of its own
/// (`describeValue`). Empty when every guard passes. Same evaluation as
/// `interpret` (diagnostics only: the plugin names the guard a disagreement
/// with Dynamo concerns). GIL held; errors are cleared.
std::string explainFailure(const BoundGuardSet &Set, PyObject *FrameLocals);

} // namespace guardjit

#endif // GUARDJIT_RUNTIME_INTERPRETER_H
