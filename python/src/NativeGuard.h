//===- NativeGuard.h - The callable Dynamo's root guard invokes -*- C++ -*-===//
//
// A C-level callable `f(f_locals) -> bool` (a PyCFunction with METH_O) that
// runs one compile unit's check target (Check/CheckTarget.h: the native
// function when compiled, the interpreter otherwise). It is installed as the
// only leaf guard of a fresh RootGuardManager (a LAMBDA_GUARD), so Dynamo's
// cache lookup calls it with the frame locals dict. The binding of a target
// only: its life is lib/Check's.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_PYTHON_NATIVEGUARD_H
#define GUARDJIT_PYTHON_NATIVEGUARD_H

#include "guardjit/Check/CheckTarget.h"

#include <memory>

namespace guardjit {

/// Returns a new reference to a callable running `Target` (GIL held).
PyObject *makeNativeGuard(std::shared_ptr<CheckTarget> Target);
/// The target of a callable made by makeNativeGuard, or null.
std::shared_ptr<CheckTarget> nativeGuardTarget(PyObject *Callable);

} // namespace guardjit

#endif // GUARDJIT_PYTHON_NATIVEGUARD_H
