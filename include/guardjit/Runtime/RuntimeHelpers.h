//===- RuntimeHelpers.h - Helpers shared by interpreter and JIT -*- C++ -*-===//
//
// C ABI helpers for every accessor and every guard that is not inlined by the
// native code generator. The interpreter calls them directly; JIT code reaches
// them through ORC absolute symbols (the pybind11 module's symbols are hidden,
// so dlsym cannot find them).
//
// Contract for all helpers: the GIL is held; arguments are borrowed; they
// never leave a Python error set (a failed read or a raising comparison is a
// failed check, as in torch/csrc/dynamo/guards.cpp). Accessors return NULL on
// failure; guards return 1 (pass) or 0 (fail).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_RUNTIME_RUNTIMEHELPERS_H
#define GUARDJIT_RUNTIME_RUNTIMEHELPERS_H

#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/Python.h"
#include "guardjit/Runtime/TorchHooks.h"

#include <cstddef>

namespace guardjit {
/// Whether the runtime accessor for `K` returns a new reference that the
/// caller must release with gj_rt_decref once the value's guards have run.
bool accessorReturnsNewRef(AccessorKind K);
} // namespace guardjit

extern "C" {
// Accessors. Borrowed results unless marked NEW.
PyObject *gj_rt_dict_get_item(PyObject *Dict, PyObject *Key);
PyObject *gj_rt_generic_dict(PyObject *Obj);
PyObject *gj_rt_getattr(PyObject *Obj, PyObject *Name);         // NEW
PyObject *gj_rt_generic_getattr(PyObject *Obj, PyObject *Name); // NEW
PyObject *gj_rt_code(PyObject *Fn);
PyObject *gj_rt_type(PyObject *Obj);
PyObject *gj_rt_tuple_get_item(PyObject *Tuple, Py_ssize_t Index);
PyObject *gj_rt_list_get_item(PyObject *List, Py_ssize_t Index);
PyObject *gj_rt_get_item(PyObject *Obj, PyObject *Key); // NEW
PyObject *gj_rt_dict_key(PyObject *Dict, Py_ssize_t Index);
PyObject *gj_rt_dict_value(PyObject *Dict, Py_ssize_t Index);
void gj_rt_decref(PyObject *Obj);

// Leaf guards.
int gj_rt_equals_match(PyObject *Value, PyObject *Constant);
int gj_rt_length_check(PyObject *Value, Py_ssize_t Length);
int gj_rt_dict_length(PyObject *Value, Py_ssize_t Length);
int gj_rt_dict_contains(PyObject *Dict, PyObject *Key, int Expected);
int gj_rt_no_hasattr(PyObject *Value, PyObject *Name);
int gj_rt_lambda(PyObject *Fn, PyObject *Value);
int gj_rt_dimension_marking(PyObject *Value, const void *Payload);
int gj_rt_default_device(PyObject *DeviceModuleDict, PyObject *Device);
/// NO_TENSOR_ALIASING: 1 iff the N objects are pairwise distinct.
int gj_rt_no_aliasing(PyObject *const *Objects, size_t N);

// Torch guards, forwarded to the installed TorchHooks (0 if none).
void gj_rt_read_local_state(guardjit::LocalState *State);
int gj_rt_tensor_match(PyObject *Value, const void *Payload,
                       const guardjit::LocalState *State);
int gj_rt_global_state(const void *Payload);
int gj_rt_torch_function_mode_stack(const void *Payload);
} // extern "C"

#endif // GUARDJIT_RUNTIME_RUNTIMEHELPERS_H
