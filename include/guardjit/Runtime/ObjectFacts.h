//===- ObjectFacts.h - What live objects prove about guards -----*- C++ -*-===//
//
// Facts about live CPython objects that the Transforms passes may use
// (Transforms/Pass.h, ObjectFacts), computed here because only the Runtime
// layer knows CPython. Plain functions over addresses: no LLVM types.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_RUNTIME_OBJECTFACTS_H
#define GUARDJIT_RUNTIME_OBJECTFACTS_H

#include <cstdint>

namespace guardjit {

/// For the address of a live object (a borrowed `PyObject*`): the address of
/// its exact type if `obj.__class__ = ...` can never change it, else 0.
/// CPython 3.11 (Objects/typeobject.c, object_set_class) refuses
/// `__class__` assignment when the current type has Py_TPFLAGS_IMMUTABLETYPE
/// (every static type: int, str, function, builtin_function_or_method,
/// code...), except between module types. GIL held.
uintptr_t fixedTypeOf(uintptr_t Address);

/// Addresses of None, True and False.
uintptr_t noneAddress();
uintptr_t trueAddress();
uintptr_t falseAddress();

} // namespace guardjit

#endif // GUARDJIT_RUNTIME_OBJECTFACTS_H
