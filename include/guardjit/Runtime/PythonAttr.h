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

/// Which registered function an object's type runs on attribute access.
enum class KnownAttrKind : uint8_t {
  None,   ///< neither (the type may still use the generic getattr)
  Module, ///< torch.nn.Module.__getattr__ when the generic lookup misses
  Config, ///< PreTrainedConfig.__getattribute__ for every read
};

/// The registered function Py_TYPE(Obj) runs, when its per-read conditions
/// hold now (knownGetAttr would decide). Pure reads only: no Python runs, no
/// reference is created (type version tags may be assigned). The answer
/// stays the same while Py_TYPE(Obj)'s version tag does, the registered
/// functions keep their code and cells, and the builtins their bodies use
/// (`super`; `type`, `AttributeError`) resolve as registered (a SkipPlan asks
/// again on every call). GIL held.
KnownAttrKind knownAttrKind(PyObject *Obj);

/// For SubtreeSkip plans (SubtreeSkip.h): `getattr(Obj, Name)` decided by
/// pure reads only, or Unknown. `Dict` is Obj's instance dict (borrowed, may
/// be NULL). The answer depends only on Py_TYPE(Obj) and its version tag,
/// the contents of `Dict` and, by knownAttrKind(Obj): for Module (Missing
/// only; Found reads of `_parameters`/`_buffers`/`_modules` too) the
/// contents of those three dicts of `Dict`; for Config the contents of
/// knownConfigMap(Obj, Dict). A type of neither kind is decided only when it
/// uses PyObject_GenericGetAttr itself. Found: *Value borrowed (held by one
/// of those dicts or by the type). Never runs Python; no error left set.
/// Mirrors knownGetAttr minus every step that could run user code.
AttrOutcome plainRead(PyObject *Obj, PyObject *Name, PyObject *Dict,
                      PyObject **Value);

/// The `attribute_map` dict a Config read of Obj consults (the instance
/// dict's entry, else the class attribute; borrowed), or NULL when there is
/// none or it is not a plain str-keyed dict. GIL held; runs no Python.
PyObject *knownConfigMap(PyObject *Obj, PyObject *Dict);

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
