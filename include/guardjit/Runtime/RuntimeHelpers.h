//===- RuntimeHelpers.h - Helpers shared by interpreter and JIT -*- C++ -*-===//
//
// C ABI helpers for every accessor and every guard that is not inlined by the
// native code generator. The interpreter calls them directly; JIT code reaches
// them through ORC absolute symbols (the pybind11 module's symbols are hidden,
// so dlsym cannot find them). The memo and descriptor types they take, and
// the read-plan analyses, are in ReadPlans.h.
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
#include "guardjit/Runtime/ReadPlans.h"
#include "guardjit/Runtime/TorchHooks.h"

#include <cstddef>
#include <cstdint>

namespace guardjit {
/// Whether a guard of kind `K` reads the thread-local dispatch key state
/// (TENSOR_MATCH, DISPATCH_KEY_SET_MATCH): the check reads it once.
bool guardNeedsLocalState(GuardKind K);

// Whether an accessor returns a new reference: accessorReturnsNewRef
// (IR/KindFacts.h, the `Ref` column of Accessors.def).

/// Whether reads of accessor `K` go through a DictReadCache slot in native
/// code: FrameLocal and DictGetItem (PyDict_GetItem), DictKey and DictValue
/// (the Index-th item in iteration order).
bool accessorUsesDictCache(AccessorKind K);
/// Whether values of accessor `K` have a ReadDescriptor (the first tier
/// reads them through it): the memoized reads (accessorUsesDictCache), and
/// __code__, getitem and tuple/list item reads, which have no memo but
/// fused guards.
bool accessorHasReadDescriptor(AccessorKind K);
/// Whether guard kind `K` has a pass memo (a DictReadCache slot whose hit
/// means "passed on this dict state"): DICT_CONTAINS.
bool guardUsesDictCache(GuardKind K);
} // namespace guardjit

extern "C" {
// Accessors. Borrowed results unless marked NEW.
PyObject *gj_rt_dict_get_item(PyObject *Dict, PyObject *Key);
/// The miss path of a memoized gj_rt_dict_get_item (native code tests the
/// hit inline): probes and refills `Cache` when the probe was pure (see
/// DictReadCache).
PyObject *gj_rt_dict_get_item_fill(PyObject *Dict, PyObject *Key,
                                   guardjit::DictReadCache *Cache);
PyObject *gj_rt_generic_dict(PyObject *Obj);
PyObject *gj_rt_getattr(PyObject *Obj, PyObject *Name);         // NEW
/// gj_rt_getattr for an exact module (`Module`'s type is PyModule_Type): the
/// attribute from the module's __dict__ when no data descriptor of the
/// module type shadows it -- what module_getattro returns then -- filling
/// `Cache` (the md_dict, its tag, the borrowed value) after a pure probe.
/// Anything else is gj_rt_getattr's answer. A new reference or NULL.
PyObject *gj_rt_module_getattr_fill(PyObject *Module, PyObject *Name,
                                    guardjit::DictReadCache *Cache); // NEW
PyObject *gj_rt_generic_getattr(PyObject *Obj, PyObject *Name); // NEW
PyObject *gj_rt_code(PyObject *Fn);
PyObject *gj_rt_type(PyObject *Obj);
PyObject *gj_rt_tuple_get_item(PyObject *Tuple, Py_ssize_t Index);
PyObject *gj_rt_list_get_item(PyObject *List, Py_ssize_t Index);
PyObject *gj_rt_get_item(PyObject *Obj, PyObject *Key); // NEW
PyObject *gj_rt_dict_key(PyObject *Dict, Py_ssize_t Index);
PyObject *gj_rt_dict_value(PyObject *Dict, Py_ssize_t Index);
/// Miss paths of the memoized DictKey / DictValue reads.
PyObject *gj_rt_dict_key_fill(PyObject *Dict, Py_ssize_t Index,
                              guardjit::DictReadCache *Cache);
PyObject *gj_rt_dict_value_fill(PyObject *Dict, Py_ssize_t Index,
                                guardjit::DictReadCache *Cache);
/// GetAttrGuardAccessor whole, as the inline lowering reads it: on an exact
/// module with a __dict__ the memo hit (the value INCREF'd) or
/// gj_rt_module_getattr_fill; on anything else gj_rt_getattr. A new
/// reference or NULL.
PyObject *gj_rt_getattr_cached(PyObject *Obj, PyObject *Name,
                               guardjit::DictReadCache *Cache); // NEW
/// ClosureGuardAccessor, FuncDefaultsGuardAccessor,
/// FuncKwDefaultsGuardAccessor (bound / instance methods unwrapped first).
PyObject *gj_rt_closure(PyObject *Fn);
PyObject *gj_rt_func_defaults(PyObject *Fn);
PyObject *gj_rt_func_kwdefaults(PyObject *Fn);
/// TypeDictGuardAccessor / TypeMROGuardAccessor; NULL for a non-type.
PyObject *gj_rt_type_dict(PyObject *Type);
PyObject *gj_rt_type_mro(PyObject *Type);
PyObject *gj_rt_lambda_call(PyObject *Fn, PyObject *Obj);        // NEW
PyObject *gj_rt_call_function_no_args(PyObject *Fn);              // NEW
PyObject *gj_rt_weakref_call(PyObject *Ref);                      // NEW
PyObject *gj_rt_global_weakref(PyObject *Globals, PyObject *Name); // NEW
/// GradGuardAccessor through TorchHooks::tensorGrad; NULL without hooks.
PyObject *gj_rt_grad(PyObject *Tensor); // NEW
/// SetGetItemGuardAccessor: PySequence_List(Obj)[Index] (no negative-index
/// normalisation). NEW: torch borrows the item from the temporary list after
/// releasing it, relying on the set to keep it; a new reference is the same
/// object without that reliance.
PyObject *gj_rt_set_get_item(PyObject *Obj, Py_ssize_t Index); // NEW
/// TupleIteratorGetItemAccessor: item it_index + Index of the iterator's
/// tuple. NULL unless `It` is an exact tuple_iterator that is not exhausted
/// and the position is in range (torch reads unchecked, relying on the
/// TUPLE_ITERATOR_LEN leaf it always installs on the same value first).
PyObject *gj_rt_tuple_iterator_get_item(PyObject *It, Py_ssize_t Index);
/// ContextVarGetSource (torch 2.14): `Var.get(Default)`, or `Var.get()`
/// when `Default` is NULL, as Dynamo's lambda calls it. An exact
/// contextvars.ContextVar is read with PyContextVar_Get (its own default
/// applies when `Default` is NULL; no value at all: NULL, the lambda's
/// LookupError); anything else has its `get` method called (a raise: NULL).
PyObject *gj_rt_contextvar_get(PyObject *Var, PyObject *Default); // NEW
void gj_rt_decref(PyObject *Obj);
/// Releases `Objs[N-1]` .. `Objs[0]` (newest first): the first tier's new
/// references, kept in a frame array instead of a chain of release blocks.
void gj_rt_decref_array(PyObject *const *Objs, int64_t N);

// Leaf guards.
int gj_rt_equals_match(PyObject *Value, PyObject *Constant);
int gj_rt_length_check(PyObject *Value, Py_ssize_t Length);
/// LENGTH_CHECK of torch 2.14.1 (length_check_set_size): a set or frozenset,
/// subclasses too, by its size; anything else as gj_rt_length_check.
int gj_rt_length_check_set_size(PyObject *Value, Py_ssize_t Length);
int gj_rt_dict_length(PyObject *Value, Py_ssize_t Length);
int gj_rt_dict_contains(PyObject *Dict, PyObject *Key, int Expected);
/// gj_rt_dict_contains that records a pass after a pure probe in `Cache`
/// (the miss path; native code tests the hit inline).
int gj_rt_dict_contains_fill(PyObject *Dict, PyObject *Key, int Expected,
                             guardjit::DictReadCache *Cache);
/// The first tier's memoized reads through a ReadDescriptor (key, index
/// and expected answer in it): the memo hit or the *_fill helper's answer
/// (gj_rt_getattr_cached's for the getattr read), then the fused
/// guards' checks (NULL or 0 when one fails; the getattr read releases its
/// new reference then).
PyObject *gj_rt_dict_get_item_desc(PyObject *Dict,
                                   guardjit::ReadDescriptor *Desc);
PyObject *gj_rt_dict_key_desc(PyObject *Dict, guardjit::ReadDescriptor *Desc);
PyObject *gj_rt_dict_value_desc(PyObject *Dict,
                                guardjit::ReadDescriptor *Desc);
PyObject *gj_rt_getattr_desc(PyObject *Obj,
                             guardjit::ReadDescriptor *Desc); // NEW
int gj_rt_dict_contains_desc(PyObject *Dict, guardjit::ReadDescriptor *Desc);
/// Runs of the first tier, one call for a table of steps: the steps
/// (readPaths) in the descriptors `Desc[0..N)` from `Parent`, in order,
/// until one fails: a read by nothing else after its fused guards, or a
/// read path of `Desc->Path` descriptors, each read from the value before
/// with its fused checks. Every new reference read (getattr, getitem) is
/// stored at `Refs[(*Count)++]`, the frame array that the check releases
/// when it ends, as it does the references it stores itself: a reference
/// lives as long as the interpreter keeps it, so no finalizer runs in the
/// middle of the check. `Refs` and `Count` may be null when no descriptor
/// of the run reads a new reference. The DICT_CONTAINS guards `Desc[0..N)`
/// on `Dict`, in order. 1 when all pass, else 0. The descriptors are
/// contiguous in the BoundGuardSet (bind lays them out in the lowering's
/// visiting order).
int gj_rt_read_run(PyObject *Parent, guardjit::ReadDescriptor *Desc,
                   int64_t N, PyObject **Refs, int64_t *Count);
int gj_rt_dict_contains_run(PyObject *Dict, guardjit::ReadDescriptor *Desc,
                            int64_t N);

/// gj_rt_code / gj_rt_get_item (the key in the descriptor) and the fused
/// guards' checks.
PyObject *gj_rt_code_desc(PyObject *Fn, guardjit::ReadDescriptor *Desc);
PyObject *gj_rt_get_item_desc(PyObject *Obj,
                              guardjit::ReadDescriptor *Desc); // NEW
/// gj_rt_tuple_get_item / gj_rt_list_get_item (the index in the
/// descriptor's Int) and the fused guards' checks. Borrowed.
PyObject *gj_rt_tuple_get_item_desc(PyObject *Tuple,
                                    guardjit::ReadDescriptor *Desc);
PyObject *gj_rt_list_get_item_desc(PyObject *List,
                                   guardjit::ReadDescriptor *Desc);
int gj_rt_no_hasattr(PyObject *Value, PyObject *Name);
int gj_rt_float_is_nan(PyObject *Value);
int gj_rt_complex_is_nan(PyObject *Value);
/// DICT_VERSION: `Value` is a dict (subclasses too) whose ma_version_tag is
/// `Tag`.
int gj_rt_dict_version(PyObject *Value, uint64_t Tag);
int gj_rt_lambda(PyObject *Fn, PyObject *Value);
int gj_rt_dimension_marking(PyObject *Value, const void *Payload);
int gj_rt_default_device(PyObject *DeviceModuleDict, PyObject *Device);
/// NO_TENSOR_ALIASING: 1 iff the N objects are pairwise distinct.
int gj_rt_no_aliasing(PyObject *const *Objects, size_t N);
/// TUPLE_ITERATOR_LEN: Py_TYPE(Value) is `Type` (which bind checks is
/// tuple_iterator) and it has `Length` items left.
int gj_rt_tuple_iterator_len(PyObject *Value, PyObject *Type,
                             Py_ssize_t Length);
/// RANGE_ITERATOR_MATCH: Py_TYPE(Value) is `Type` (range_iterator) and its
/// normalised (start, stop, step) are the given ones.
int gj_rt_range_iterator_match(PyObject *Value, PyObject *Type, int64_t Start,
                               int64_t Stop, int64_t Step);
/// FAKE_SCRIPT_TYPE_MATCH: isinstance(Value, FakeCls) ? Value.real_obj :
/// Value, then its exact type is `Type`.
int gj_rt_fake_script_type_match(PyObject *Value, PyObject *Type,
                                 PyObject *FakeCls);
/// MAPPING_KEYS_MATCH: PyMapping_Keys(Value) == Keys.
int gj_rt_mapping_keys_match(PyObject *Value, PyObject *Keys);
/// SET_CONTAINS: (set or frozenset) && item in Value, compared to Expected.
int gj_rt_set_contains(PyObject *Value, PyObject *Item, int Expected);
/// DISPATCH_KEY_SET_MATCH: Value is a `DksType` instance whose
/// raw_repr(), with `State` applied, is `Expected`.
int gj_rt_dispatch_key_set_match(PyObject *Value, PyObject *DksType,
                                 uint64_t Expected,
                                 const guardjit::LocalState *State);
/// DUAL_LEVEL_MATCH: ForwardAD._current_level is an exact int == Level.
int gj_rt_dual_level_match(PyObject *ForwardAD, int64_t Level);
/// AUTOGRAD_SAVED_TENSORS_HOOKS through TorchHooks::savedTensorsHooks (see
/// Guards.def): `GraphModule` (borrowed) is torch.fx.GraphModule; `HasIds`
/// 0 expects no inlineable hooks, 1 the hooks whose ids are `PackId` and
/// `UnpackId`. 0 without the hook. GIL held; never raises.
int gj_rt_saved_tensors_hooks(PyObject *GraphModule, int64_t HasIds,
                              int64_t PackId, int64_t UnpackId);
/// COW_TENSOR_MATCH through TorchHooks::cowTensorMatch (see Guards.def):
/// `Expected` 1 wants a copy-on-write tensor, 0 one that is not. 0 without
/// the hook. GIL held; never raises.
int gj_rt_cow_tensor_match(PyObject *Value, int64_t Expected);
/// STORAGE_OVERLAPPING through TorchHooks::storageOverlapping; 0 without.
int gj_rt_storage_overlapping(PyObject *const *Tensors, size_t N,
                              size_t NumOverlapping);

// Torch guards, forwarded to the installed TorchHooks (0 if none).
void gj_rt_read_local_state(guardjit::LocalState *State);
int gj_rt_tensor_match(PyObject *Value, const void *Payload,
                       const guardjit::LocalState *State);
int gj_rt_global_state(const void *Payload);
int gj_rt_torch_function_mode_stack(const void *Payload);
} // extern "C"

#endif // GUARDJIT_RUNTIME_RUNTIMEHELPERS_H
