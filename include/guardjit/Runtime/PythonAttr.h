//===- PythonAttr.h - Attribute reads without running known Python -*- C++ -*-//
//
// `getattr(obj, name)` and `hasattr(obj, name)` for objects whose type runs a
// known Python function on attribute access, computed natively with exactly
// the function's result and with no exception created for a missing
// attribute. Two functions are known, each registered from Python once its
// bytecode was checked against the reviewed source (python/guardjit/pyattr.py):
//
//  * torch 2.13's `torch.nn.Module.__getattr__` (searches `_parameters`,
//    `_buffers`, `_modules` of the instance dict, then raises AttributeError),
//    reached through CPython 3.11's `slot_tp_getattr_hook` when the generic
//    lookup misses;
//  * transformers' `PreTrainedConfig.__getattribute__` (maps the name through
//    `attribute_map`) with the `HeterogeneousConfigMixin.__getattribute__` it
//    calls through `super()` (checks `__dict__['_heterogeneity_spec']`).
//
// Every other type, and every object of these types for which a condition of
// the equivalence argument (docs/guard-semantics.md §13) does not hold at the
// time of the read, is reported `Unknown` before anything with a side effect
// has run; the caller then runs CPython's own PyObject_GetAttr /
// PyObject_HasAttr, so the answer is always CPython's.
//
// Runtime layer: plain CPython 3.11, no LLVM, no torch. GIL held for every
// function; no Python error is left set.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_RUNTIME_PYTHONATTR_H
#define GUARDJIT_RUNTIME_PYTHONATTR_H

#include "guardjit/Runtime/Python.h"

#include <cstdint>
#include <string>

namespace guardjit {

/// What knownGetAttr decided.
enum class AttrOutcome : uint8_t {
  Found,   ///< the attribute's value (a new reference in *Value)
  Missing, ///< CPython would raise (AttributeError or any other error)
  Unknown, ///< not decided; nothing observable was done: run CPython's path
};

/// `getattr(Obj, Name)` when Py_TYPE(Obj) runs a registered function.
/// Found: *Value is a new reference. Missing: the read fails (the caller's
/// accessor fails, `hasattr` is false). Unknown: *Value is untouched and no
/// user code ran. Borrowed arguments; no error is left set.
AttrOutcome knownGetAttr(PyObject *Obj, PyObject *Name, PyObject **Value);

/// Registers torch.nn.Module.__getattr__ (a function object of one
/// positional `name` besides `self`). The caller has checked its bytecode
/// (pyattr.py). Replaces an earlier registration. Returns false and sets
/// *Error when `Fn` is not a plain Python function. Keeps strong references.
bool registerModuleGetattr(PyObject *Fn, std::string *Error);

/// Registers transformers' PreTrainedConfig.__getattribute__ (`Outer`) and
/// HeterogeneousConfigMixin.__getattribute__ (`Inner`), both zero-argument
/// `super()` users (one `__class__` free variable each); the classes are
/// read from those cells now and checked again on every read. Same contract
/// as registerModuleGetattr.
bool registerConfigGetattribute(PyObject *Outer, PyObject *Inner,
                                std::string *Error);

/// Drops both registrations (knownGetAttr then always answers Unknown).
void unregisterKnownAttrFunctions();

/// Counters since the process started (or the last reset), for
/// guardjit.stats(): reads decided natively per registered function, and
/// reads of those types handed back to CPython (Unknown).
struct KnownAttrStats {
  uint64_t ModuleReads = 0;
  uint64_t ConfigReads = 0;
  uint64_t Delegated = 0;
};
KnownAttrStats knownAttrStats();
void resetKnownAttrStats();

} // namespace guardjit

#endif // GUARDJIT_RUNTIME_PYTHONATTR_H
