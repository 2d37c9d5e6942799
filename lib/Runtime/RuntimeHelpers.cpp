//===- RuntimeHelpers.cpp - Helpers shared by interpreter and JIT ---------===//
//
// The kind facts of RuntimeHelpers.h and the helpers without a memo: plain
// accessors and leaf guards. The memoized dict reads are in DictReads.cpp,
// the first tier's descriptor reads in ReadPlans.cpp, dimension marking in
// DimensionMarking.cpp, the torch guards in TorchForwarding.cpp.
//
// Each helper mirrors one accessor or leaf guard of torch 2.13's
// torch/csrc/dynamo/guards.cpp (class named in the comment), with one rule
// added: a Python error is never left set. Where Dynamo leaves an error set
// and still returns a result (LENGTH_CHECK, DICT_CONTAINS, LAMBDA_GUARD with
// a raising __bool__), the helper returns Dynamo's result and clears the
// error. See docs/guard-semantics.md for the experiments behind each rule.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/RuntimeHelpers.h"

#include "CPythonReads.h"
#include "guardjit/Runtime/PythonAttr.h"

#include <algorithm>
#include <cmath>
#include <vector>

using namespace guardjit;

bool guardjit::accessorUsesDictCache(AccessorKind K) {
  return K == AccessorKind::FrameLocal || K == AccessorKind::DictGetItem ||
         K == AccessorKind::DictKey || K == AccessorKind::DictValue ||
         K == AccessorKind::GetAttr;
}

bool guardjit::accessorHasReadDescriptor(AccessorKind K) {
  return accessorUsesDictCache(K) || K == AccessorKind::Code ||
         K == AccessorKind::GetItem || K == AccessorKind::TupleGetItem ||
         K == AccessorKind::ListGetItem;
}

bool guardjit::guardNeedsLocalState(GuardKind K) {
  return K == GuardKind::TensorMatch || K == GuardKind::DispatchKeySetMatch;
}

bool guardjit::guardUsesDictCache(GuardKind K) {
  return K == GuardKind::DictContains;
}

//===----------------------------------------------------------------------===//
// Accessors
//===----------------------------------------------------------------------===//

extern "C" PyObject *gj_rt_generic_dict(PyObject *Obj) {
  // The common case first, as the inline lowering tests it: a managed dict
  // whose inline values were already turned into a dict that exists.
  // PyObject_GenericGetDict then returns exactly that pointer with no side
  // effect.
  if (cpy::hasManagedDict(Py_TYPE(Obj)) && !cpy::managedValuesInline(Obj)) {
    if (PyObject *Dict = cpy::managedDict(Obj))
      return Dict;
  }
  // GetGenericDictGuardAccessor: PyObject_GenericGetDict materializes a
  // managed (3.11 values-layout) dict and stores it in the object, exactly as
  // Dynamo's read does. The object now owns the dict, so dropping our
  // reference leaves a borrowed pointer valid for as long as `Obj` keeps that
  // __dict__ -- the same lifetime Dynamo relies on for PyDict_GetItem results.
  PyObject *Dict = PyObject_GenericGetDict(Obj, nullptr);
  if (!Dict) {
    PyErr_Clear();
    return nullptr;
  }
  Py_DECREF(Dict);
  return Dict;
}

extern "C" PyObject *gj_rt_getattr(PyObject *Obj, PyObject *Name) {
  // GetAttrGuardAccessor. Types whose attribute access runs a registered
  // Python function (nn.Module.__getattr__, transformers' config
  // __getattribute__) are read natively with the same result (PythonAttr.h).
  PyObject *Known;
  switch (knownGetAttr(Obj, Name, &Known)) {
  case AttrOutcome::Found:
    return Known;
  case AttrOutcome::Missing:
    return nullptr;
  case AttrOutcome::Unknown:
    break;
  }
  PyObject *X = PyObject_GetAttr(Obj, Name);
  if (!X)
    PyErr_Clear();
  return X;
}

extern "C" PyObject *gj_rt_generic_getattr(PyObject *Obj, PyObject *Name) {
  // GenericGetAttrGuardAccessor. PyObject_GenericGetAttr raises TypeError for
  // a non-str name instead of crashing.
  PyObject *X = PyObject_GenericGetAttr(Obj, Name);
  if (!X)
    PyErr_Clear();
  return X;
}

extern "C" PyObject *gj_rt_code(PyObject *Fn) {
  // CodeGuardAccessor: unwrap bound / instance methods first.
  PyObject *Func = Fn;
  if (PyMethod_Check(Fn))
    Func = PyMethod_GET_FUNCTION(Fn);
  else if (PyInstanceMethod_Check(Fn))
    Func = PyInstanceMethod_GET_FUNCTION(Fn);
  // Sets SystemError (and returns NULL) for a non-function.
  PyObject *Code = PyFunction_GetCode(Func);
  if (!Code)
    PyErr_Clear();
  return Code;
}

extern "C" PyObject *gj_rt_type(PyObject *Obj) {
  // TypeGuardAccessor: never fails.
  return reinterpret_cast<PyObject *>(Py_TYPE(Obj));
}

extern "C" PyObject *gj_rt_tuple_get_item(PyObject *Tuple, Py_ssize_t Index) {
  // TupleGetItemGuardAccessor: PyTuple_GetItem checks the type and the bounds
  // (no negative-index normalisation) and reports both as errors.
  PyObject *X = PyTuple_GetItem(Tuple, Index);
  if (!X)
    PyErr_Clear();
  return X;
}

extern "C" PyObject *gj_rt_list_get_item(PyObject *List, Py_ssize_t Index) {
  // ListGetItemGuardAccessor, same rules as the tuple accessor.
  PyObject *X = PyList_GetItem(List, Index);
  if (!X)
    PyErr_Clear();
  return X;
}

extern "C" PyObject *gj_rt_get_item(PyObject *Obj, PyObject *Key) {
  // GetItemGuardAccessor: the full __getitem__ protocol, new reference.
  PyObject *X = PyObject_GetItem(Obj, Key);
  if (!X)
    PyErr_Clear();
  return X;
}

/// The function object behind `Fn`, as the Code/Closure/FuncDefaults
/// accessors unwrap it: a bound method's or instancemethod's function, else
/// `Fn` itself (the PyFunction_Get* call then rejects non-functions).
static PyObject *unwrapFunction(PyObject *Fn) {
  if (PyMethod_Check(Fn))
    return PyMethod_GET_FUNCTION(Fn);
  if (PyInstanceMethod_Check(Fn))
    return PyInstanceMethod_GET_FUNCTION(Fn);
  return Fn;
}

/// PyFunction_Get{Closure,Defaults,KwDefaults}: SystemError for a
/// non-function, and NULL *without* an error when the slot is empty (no
/// closure / defaults). Both are failed reads in torch.
template <PyObject *(*Get)(PyObject *)>
static PyObject *functionSlot(PyObject *Fn) {
  PyObject *X = Get(unwrapFunction(Fn));
  if (!X)
    PyErr_Clear();
  return X;
}

extern "C" PyObject *gj_rt_closure(PyObject *Fn) {
  return functionSlot<PyFunction_GetClosure>(Fn);
}

extern "C" PyObject *gj_rt_func_defaults(PyObject *Fn) {
  return functionSlot<PyFunction_GetDefaults>(Fn);
}

extern "C" PyObject *gj_rt_func_kwdefaults(PyObject *Fn) {
  return functionSlot<PyFunction_GetKwDefaults>(Fn);
}

extern "C" PyObject *gj_rt_type_dict(PyObject *Type) {
  // TypeDictGuardAccessor reads tp_dict without checking that the input is a
  // type (Dynamo only builds it under a type); a non-type fails here instead
  // of reading past the object.
  if (!PyType_Check(Type))
    return nullptr;
  return reinterpret_cast<PyTypeObject *>(Type)->tp_dict;
}

extern "C" PyObject *gj_rt_type_mro(PyObject *Type) {
  // TypeMROGuardAccessor: as above; torch hands a NULL tp_mro (a type not
  // yet readied) to its child, which would crash -- a failed read here.
  if (!PyType_Check(Type))
    return nullptr;
  return reinterpret_cast<PyTypeObject *>(Type)->tp_mro;
}

extern "C" PyObject *gj_rt_lambda_call(PyObject *Fn, PyObject *Obj) {
  // PythonLambdaGuardAccessor: fn(obj), a raising fn fails the read.
  PyObject *X = PyObject_CallOneArg(Fn, Obj);
  if (!X)
    PyErr_Clear();
  return X;
}

extern "C" PyObject *gj_rt_call_function_no_args(PyObject *Fn) {
  // CallFunctionNoArgsGuardAccessor.
  if (!PyCallable_Check(Fn))
    return nullptr;
  PyObject *X = PyObject_CallNoArgs(Fn);
  if (!X)
    PyErr_Clear();
  return X;
}

/// PyWeakref_GetRef (3.13; torch's compat shim on 3.11) of a weakref:
/// a strong reference to the referent, or None once it died. On 3.11
/// PyWeakref_GET_OBJECT returns Py_None for a dead ref (a weakref can never
/// point to None itself).
static PyObject *derefWeak(PyObject *Ref) {
  if (!PyWeakref_Check(Ref))
    return nullptr;
  return Py_NewRef(PyWeakref_GET_OBJECT(Ref));
}

extern "C" PyObject *gj_rt_weakref_call(PyObject *Ref) {
  // WeakRefCallGuardAccessor.
  return derefWeak(Ref);
}

extern "C" PyObject *gj_rt_global_weakref(PyObject *Globals, PyObject *Name) {
  // GlobalWeakRefGuardAccessor: PyDict_GetItem (NULL for a non-dict, errors
  // swallowed on 3.11), then the weakref's referent.
  PyObject *Ref = PyDict_GetItem(Globals, Name);
  return Ref ? derefWeak(Ref) : nullptr;
}

extern "C" void gj_rt_decref(PyObject *Obj) { Py_DECREF(Obj); }

extern "C" void gj_rt_decref_array(PyObject *const *Objs, int64_t N) {
  for (int64_t I = N; I-- > 0;)
    Py_DECREF(Objs[I]);
}

//===----------------------------------------------------------------------===//
// Leaf guards
//===----------------------------------------------------------------------===//

extern "C" int gj_rt_equals_match(PyObject *Value, PyObject *Constant) {
  // EQUALS_MATCH: pointer fast path (constants are immutable or deep-copied
  // by Dynamo), then the exact type, then ==. Dynamo snapshots the constant's
  // type at construction; the bound constant is kept alive, so its type is
  // the same object here.
  if (Value == Constant)
    return 1;
  if (Py_TYPE(Value) != Py_TYPE(Constant))
    return 0;
  int R = PyObject_RichCompareBool(Value, Constant, Py_EQ);
  if (R < 0) {
    PyErr_Clear();
    return 0;
  }
  return R;
}

extern "C" int gj_rt_length_check(PyObject *Value, Py_ssize_t Length) {
  // LENGTH_CHECK: PySequence_Length(value) == n. Dynamo leaves the error of a
  // non-sequence (e.g. a dict) set; -1 never equals a recorded length. An
  // exact tuple's or list's sq_length is its ob_size (a subclass may define
  // __len__).
  if (PyTuple_CheckExact(Value) || PyList_CheckExact(Value))
    return Py_SIZE(Value) == Length;
  Py_ssize_t N = PySequence_Length(Value);
  if (N < 0)
    PyErr_Clear();
  return N == Length;
}

extern "C" int gj_rt_length_check_set_size(PyObject *Value,
                                           Py_ssize_t Length) {
  // torch 2.14.1's LENGTH_CHECK reads a set's size itself (Dynamo spells the
  // guard set.__len__(x) == n), so a subclass's __len__ is not called;
  // measured on the wheel (docs/guard-semantics.md, "length-check").
  if (PyAnySet_Check(Value))
    return PySet_GET_SIZE(Value) == Length;
  return gj_rt_length_check(Value, Length);
}

extern "C" int gj_rt_dict_length(PyObject *Value, Py_ssize_t Length) {
  // DICT_LENGTH: dict subclasses accepted.
  return PyDict_Check(Value) && PyDict_GET_SIZE(Value) == Length;
}


extern "C" int gj_rt_no_hasattr(PyObject *Value, PyObject *Name) {
  // NO_HASATTR: on 3.11 PyObject_HasAttr swallows every exception, so a
  // raising __getattr__ counts as absent: hasattr is "getattr returns a
  // value", which knownGetAttr decides without an exception when it can.
  PyObject *Known;
  switch (knownGetAttr(Value, Name, &Known)) {
  case AttrOutcome::Found:
    Py_DECREF(Known);
    return 0;
  case AttrOutcome::Missing:
    return 1;
  case AttrOutcome::Unknown:
    break;
  }
  return PyObject_HasAttr(Value, Name) == 0;
}

extern "C" int gj_rt_float_is_nan(PyObject *Value) {
  // FLOAT_IS_NAN: exact float only.
  return PyFloat_CheckExact(Value) && std::isnan(PyFloat_AS_DOUBLE(Value));
}

extern "C" int gj_rt_complex_is_nan(PyObject *Value) {
  // COMPLEX_IS_NAN: exact complex with a NaN real or imaginary part.
  if (!PyComplex_CheckExact(Value))
    return 0;
  Py_complex C = reinterpret_cast<PyComplexObject *>(Value)->cval;
  return std::isnan(C.real) || std::isnan(C.imag);
}

extern "C" int gj_rt_dict_version(PyObject *Value, uint64_t Tag) {
  // DICT_VERSION: get_dict_version_unchecked on 3.11 is ma_version_tag.
  return PyDict_Check(Value) && cpy::dictTag(Value) == Tag;
}

extern "C" int gj_rt_lambda(PyObject *Fn, PyObject *Value) {
  // LAMBDA_GUARD: a raising lambda fails. Dynamo converts PyObject_IsTrue's
  // -1 (raising __bool__) to true and leaves the error set; we keep the
  // answer and clear the error.
  PyObject *X = PyObject_CallOneArg(Fn, Value);
  if (!X) {
    PyErr_Clear();
    return 0;
  }
  int T = PyObject_IsTrue(X);
  Py_DECREF(X);
  if (T < 0) {
    PyErr_Clear();
    return 1;
  }
  return T;
}

extern "C" int gj_rt_default_device(PyObject *DeviceModuleDict,
                                    PyObject *Device) {
  // DEFAULT_DEVICE: `CURRENT_DEVICE` of torch.utils._device, by identity then
  // ==. Interned once and leaked, as Dynamo does.
  static PyObject *CurrentDeviceStr =
      PyUnicode_InternFromString("CURRENT_DEVICE");
  if (!CurrentDeviceStr) {
    PyErr_Clear();
    return 0;
  }
  PyObject *Current = PyDict_GetItem(DeviceModuleDict, CurrentDeviceStr);
  if (Current == Device)
    return 1;
  // Dynamo would hand NULL to RichCompareBool (a crash); a missing
  // CURRENT_DEVICE is a failed check here.
  if (!Current)
    return 0;
  int R = PyObject_RichCompareBool(Current, Device, Py_EQ);
  if (R < 0) {
    PyErr_Clear();
    return 0;
  }
  return R;
}

extern "C" int gj_rt_no_aliasing(PyObject *const *Objects, size_t N) {
  // NO_TENSOR_ALIASING: identity only (views of one storage are distinct).
  // Small sets are compared pairwise, which beats hashing below ~16 items.
  if (N < 2)
    return 1;
  if (N <= 16) {
    for (size_t I = 1; I < N; ++I)
      for (size_t J = 0; J < I; ++J)
        if (Objects[I] == Objects[J])
          return 0;
    return 1;
  }
  thread_local std::vector<PyObject *> Sorted;
  Sorted.assign(Objects, Objects + N);
  std::sort(Sorted.begin(), Sorted.end());
  return std::adjacent_find(Sorted.begin(), Sorted.end()) == Sorted.end();
}
