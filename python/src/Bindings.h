//===- Bindings.h - The areas of guardjit._core -----------------*- C++ -*-===//
//
// One populate function per area of the module; MainModule.cpp calls them in
// this order (IR types are registered before signatures that name them).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_PYTHON_BINDINGS_H
#define GUARDJIT_PYTHON_BINDINGS_H

#include <pybind11/pybind11.h>

namespace guardjit::python {

/// GuardSet, BoundGuardSet, bind (IRCore.cpp).
void populateIRCore(pybind11::module_ &M);
/// CompiledCheck, compile, make_guard, subtree skipping, tier-up, the
/// object cache (Check.cpp).
void populateCheck(pybind11::module_ &M);
/// run_pipeline, registered_passes, diffsets (Pass.cpp).
void populatePass(pybind11::module_ &M);
/// Torch thread-local and dispatch-key state (Torch.cpp).
void populateTorch(pybind11::module_ &M);
/// Known attribute functions (Attr.cpp).
void populateAttr(pybind11::module_ &M);
/// PortableSet, portable_load: portable.h's checker (Portable.cpp).
void populatePortable(pybind11::module_ &M);

} // namespace guardjit::python

#endif // GUARDJIT_PYTHON_BINDINGS_H
