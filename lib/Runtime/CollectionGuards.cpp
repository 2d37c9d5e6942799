//===- CollectionGuards.cpp - Iterator, set, mapping and state helpers ----===//
//
// The runtime helpers of the torch 2.13 guard kinds over iterators, sets,
// mappings and ambient state: TUPLE_ITERATOR_LEN, RANGE_ITERATOR_MATCH,
// MAPPING_KEYS_MATCH, SET_CONTAINS, DISPATCH_KEY_SET_MATCH, DUAL_LEVEL_MATCH,
// FAKE_SCRIPT_TYPE_MATCH and the accessors SetGetItemGuardAccessor,
// TupleIteratorGetItemAccessor and torch 2.14's ContextVarGetSource (those
// forwarded to TorchHooks are in TorchForwarding.cpp). Each
// mirrors the class of the same name in torch/csrc/dynamo/guards.cpp (or the
// Python lambda of torch/_dynamo/guards.py); as in RuntimeHelpers.cpp,
// where Dynamo returns a result with a Python error left set, we return that
// result and clear the error; where Dynamo would crash (a NULL it does not
// test), the check fails. docs/guard-semantics.md §9 lists each case.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/CPythonABI.h"
#include "guardjit/Runtime/RuntimeHelpers.h"

using namespace guardjit;

//===----------------------------------------------------------------------===//
// Accessors
//===----------------------------------------------------------------------===//

extern "C" PyObject *gj_rt_set_get_item(PyObject *Obj, Py_ssize_t Index) {
  // SetGetItemGuardAccessor: `lst = PySequence_List(obj); x =
  // PyList_GetItem(lst, index)`; no type check, so any iterable works. torch
  // passes a NULL list to PyList_GetItem when the value is not iterable (a
  // crash); that is a failed read here.
  PyObject *List = PySequence_List(Obj);
  if (!List) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject *X = PyList_GetItem(List, Index); // borrowed, bounds-checked
  if (!X)
    PyErr_Clear();
  else
    Py_INCREF(X);
  Py_DECREF(List);
  return X;
}

extern "C" PyObject *gj_rt_tuple_iterator_get_item(PyObject *It,
                                                   Py_ssize_t Index) {
  // TupleIteratorGetItemAccessor: PyTuple_GET_ITEM(it_seq, it_index + i).
  if (Py_TYPE(It) != &PyTupleIter_Type)
    return nullptr;
  auto *I = reinterpret_cast<abi::TupleIterLayout *>(It);
  if (!I->it_seq)
    return nullptr;
  Py_ssize_t Pos = I->it_index + Index;
  if (Pos < 0 || Pos >= PyTuple_GET_SIZE(I->it_seq))
    return nullptr;
  return PyTuple_GET_ITEM(I->it_seq, Pos);
}

extern "C" PyObject *gj_rt_contextvar_get(PyObject *Var, PyObject *Default) {
  // ContextVarGetSource: Dynamo's PythonLambdaGuardAccessor calls `lambda x,
  // d=default: x.get(d)` (or `lambda x: x.get()`). ContextVar is a static
  // type that cannot be subclassed or given attributes, so on an exact one
  // `x.get` is ContextVar.get: PyContextVar_Get, and a LookupError when it
  // finds nothing (no value, no default of its own, none passed).
  PyObject *Out = nullptr;
  if (PyContextVar_CheckExact(Var)) {
    if (PyContextVar_Get(Var, Default, &Out) < 0) {
      PyErr_Clear();
      return nullptr;
    }
    return Out;
  }
  // Anything else: the lambda's LOAD_METHOD + CALL, i.e. a method call.
  static PyObject *Get = PyUnicode_InternFromString("get");
  if (!Get) {
    PyErr_Clear();
    return nullptr;
  }
  Out = Default ? PyObject_CallMethodOneArg(Var, Get, Default)
                : PyObject_CallMethodNoArgs(Var, Get);
  if (!Out)
    PyErr_Clear();
  return Out;
}

//===----------------------------------------------------------------------===//
// Leaf guards
//===----------------------------------------------------------------------===//

extern "C" int gj_rt_tuple_iterator_len(PyObject *Value, PyObject *Type,
                                        Py_ssize_t Length) {
  // TUPLE_ITERATOR_LEN: exact type, then size - index (0 when exhausted).
  if (reinterpret_cast<PyObject *>(Py_TYPE(Value)) != Type ||
      Type != reinterpret_cast<PyObject *>(&PyTupleIter_Type))
    return 0;
  auto *I = reinterpret_cast<abi::TupleIterLayout *>(Value);
  Py_ssize_t Left = 0;
  if (I->it_seq)
    Left = PyTuple_GET_SIZE(I->it_seq) - I->it_index;
  return Left == Length;
}

extern "C" int gj_rt_range_iterator_match(PyObject *Value, PyObject *Type,
                                          int64_t Start, int64_t Stop,
                                          int64_t Step) {
  // RANGE_ITERATOR_MATCH on 3.11: start + index * step and start + len * step
  // in C long arithmetic. Unsigned arithmetic gives the same (wrapping)
  // results without the undefined behaviour of a signed overflow.
  if (reinterpret_cast<PyObject *>(Py_TYPE(Value)) != Type ||
      Type != reinterpret_cast<PyObject *>(&PyRangeIter_Type))
    return 0;
  auto *R = reinterpret_cast<abi::RangeIterLayout *>(Value);
  auto U = [](long X) { return static_cast<uint64_t>(X); };
  int64_t CurStart = static_cast<int64_t>(U(R->start) + U(R->index) * U(R->step));
  int64_t CurStop = static_cast<int64_t>(U(R->start) + U(R->len) * U(R->step));
  return CurStart == Start && CurStop == Stop && R->step == Step;
}

extern "C" int gj_rt_fake_script_type_match(PyObject *Value, PyObject *Type,
                                            PyObject *FakeCls) {
  // FAKE_SCRIPT_TYPE_MATCH (torch 2.13; its C++ postdates the source we
  // read, so this follows the 2.13 wheel's behaviour, probed through
  // RootGuardManager.check: isinstance honours a `__class__` override, the
  // attribute read honours `__getattr__`, and a raising isinstance or
  // `real_obj` read fails with the error cleared).
  int IsFake = PyObject_IsInstance(Value, FakeCls);
  if (IsFake < 0) {
    PyErr_Clear();
    return 0;
  }
  if (!IsFake)
    return reinterpret_cast<PyObject *>(Py_TYPE(Value)) == Type;
  static PyObject *RealObj = PyUnicode_InternFromString("real_obj");
  if (!RealObj) {
    PyErr_Clear();
    return 0;
  }
  PyObject *Real = PyObject_GetAttr(Value, RealObj);
  if (!Real) {
    PyErr_Clear();
    return 0;
  }
  int R = reinterpret_cast<PyObject *>(Py_TYPE(Real)) == Type;
  Py_DECREF(Real);
  return R;
}

extern "C" int gj_rt_mapping_keys_match(PyObject *Value, PyObject *Keys) {
  // MAPPING_KEYS_MATCH: `keys = PyMapping_Keys(v); r =
  // PyObject_RichCompareBool(keys, _keys, Py_EQ); return r;`. torch does not
  // test `keys` for NULL (a crash); that fails here. A raising comparison
  // returns -1, which torch's bool conversion makes a pass with the error
  // left set: the same answer here, error cleared.
  PyObject *Actual = PyMapping_Keys(Value);
  if (!Actual) {
    PyErr_Clear();
    return 0;
  }
  int R = PyObject_RichCompareBool(Actual, Keys, Py_EQ);
  Py_DECREF(Actual);
  if (R < 0) {
    PyErr_Clear();
    return 1;
  }
  return R;
}

extern "C" int gj_rt_set_contains(PyObject *Value, PyObject *Item,
                                  int Expected) {
  // SET_CONTAINS: `int r = (PySet_Check(v) || PyFrozenSet_Check(v)) &&
  // PySet_Contains(v, item); return r == contains;`. As in DICT_CONTAINS the
  // && turns PySet_Contains's -1 into 1 ("contains"), error left set; same
  // answer here, error cleared.
  int R = 0;
  if (PySet_Check(Value) || PyFrozenSet_Check(Value)) {
    R = PySet_Contains(Value, Item);
    if (R < 0) {
      PyErr_Clear();
      R = 1;
    }
  }
  return R == (Expected ? 1 : 0);
}

extern "C" int gj_rt_dispatch_key_set_match(PyObject *Value, PyObject *DksType,
                                            uint64_t Expected,
                                            const LocalState *State) {
  // DISPATCH_KEY_SET_MATCH: `handle.cast<c10::DispatchKeySet>()` accepts an
  // instance of the bound class (subclasses too) and throws otherwise (a
  // failed check here); then raw == LocalState.apply(value).raw_repr().
  // raw_repr() is the bound C++ method returning the 64-bit representation.
  if (!PyType_Check(DksType) ||
      !PyObject_TypeCheck(Value, reinterpret_cast<PyTypeObject *>(DksType)))
    return 0;
  static PyObject *RawRepr = PyUnicode_InternFromString("raw_repr");
  if (!RawRepr) {
    PyErr_Clear();
    return 0;
  }
  PyObject *Raw = PyObject_CallMethodNoArgs(Value, RawRepr);
  if (!Raw) {
    PyErr_Clear();
    return 0;
  }
  uint64_t Bits = PyLong_AsUnsignedLongLong(Raw);
  Py_DECREF(Raw);
  if (Bits == static_cast<uint64_t>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  uint64_t Applied = (Bits | State->Included) & ~State->Excluded;
  return Applied == Expected;
}

extern "C" int gj_rt_dual_level_match(PyObject *ForwardAD, int64_t Level) {
  // DUAL_LEVEL_MATCH::_check: getattr(module, "_current_level"), an exact
  // int compared with PyLong_AsLongLong. torch leaves an overflow error set
  // and compares -1; same answer here, error cleared.
  PyObject *Current = PyObject_GetAttrString(ForwardAD, "_current_level");
  if (!Current) {
    PyErr_Clear();
    return 0;
  }
  if (!PyLong_CheckExact(Current)) {
    Py_DECREF(Current);
    return 0;
  }
  long long L = PyLong_AsLongLong(Current);
  Py_DECREF(Current);
  if (L == -1 && PyErr_Occurred())
    PyErr_Clear();
  return L == Level;
}
