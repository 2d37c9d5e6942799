//===- DictReads.cpp - Memoized dict and module reads ---------------------===//
//
// The reads that go through a DictReadCache slot (ReadPlans.h): dict
// items by key (FrameLocal, DictGetItem) and by insertion index (DictKey,
// DictValue), an exact module's attributes, DICT_CONTAINS. Each *_fill
// helper is the miss path that native code calls after its inline hit test
// (CPythonReads.h, memoHit); the plain helpers are the interpreter's.
//
//===----------------------------------------------------------------------===//
#include "DictReads.h"

#include "CPythonReads.h"

using namespace guardjit;
using namespace guardjit::cpy;

extern "C" PyObject *gj_rt_dict_get_item(PyObject *Dict, PyObject *Key) {
  // DictGetItemGuardAccessor / FrameLocalsGuardAccessor (dict input): on 3.11
  // PyDict_GetItem returns NULL for a non-dict and swallows hash/eq errors,
  // so no error can be left set.
  return PyDict_GetItem(Dict, Key);
}

extern "C" PyObject *gj_rt_dict_get_item_fill(PyObject *Dict, PyObject *Key,
                                              DictReadCache *Cache) {
  if (Py_TYPE(Dict) != &PyDict_Type || !PyUnicode_CheckExact(Key))
    return PyDict_GetItem(Dict, Key);
  uint64_t Tag = dictTag(Dict);
  PyObject *X = PyDict_GetItem(Dict, Key);
  // Fill only after a pure probe (ReadPlans.h). An unchanged tag means
  // nothing mutated the dict during the probe, so its keys had the kind we
  // test now throughout, and with all-str keys and a str key the probe ran
  // no user code: (Dict, Tag) -> X holds for as long as the tag does.
  if (X && pureStrProbe(Dict, Tag))
    fillMemo(*Cache, Dict, Tag, X);
  return X;
}

extern "C" PyObject *gj_rt_module_getattr_fill(PyObject *Module,
                                               PyObject *Name,
                                               DictReadCache *Cache) {
  // module_getattro is _PyObject_GenericGetAttrWithDict, then the module's
  // __getattr__ (only when that raised AttributeError): a data descriptor
  // of the module type wins over md_dict, and md_dict over anything else.
  // PyModule_Type and object are static, immutable types, so the lookup
  // below gives the same answer for as long as the process lives.
  PyObject *Dict = PyModule_GetDict(Module); // borrowed, never NULL
  if (Py_TYPE(Module) == &PyModule_Type && Dict &&
      Py_TYPE(Dict) == &PyDict_Type && PyUnicode_CheckExact(Name)) {
    PyObject *Descr = _PyType_Lookup(&PyModule_Type, Name);
    if (!Descr || !Py_TYPE(Descr)->tp_descr_set) {
      uint64_t Tag = dictTag(Dict);
      if (PyObject *X = PyDict_GetItem(Dict, Name)) {
        if (pureStrProbe(Dict, Tag))
          fillMemo(*Cache, Dict, Tag, X);
        return Py_NewRef(X);
      }
    }
  }
  return gj_rt_getattr(Module, Name);
}

extern "C" PyObject *gj_rt_getattr_cached(PyObject *Obj, PyObject *Name,
                                          DictReadCache *Cache) {
  return getattrCached(Obj, Name, Cache);
}

extern "C" PyObject *gj_rt_dict_key(PyObject *Dict, Py_ssize_t Index) {
  PyObject *K, *V;
  return dictItemAt(Dict, Index, &K, &V) ? K : nullptr;
}

extern "C" PyObject *gj_rt_dict_value(PyObject *Dict, Py_ssize_t Index) {
  PyObject *K, *V;
  return dictItemAt(Dict, Index, &K, &V) ? V : nullptr;
}

extern "C" PyObject *gj_rt_dict_key_fill(PyObject *Dict, Py_ssize_t Index,
                                         DictReadCache *Cache) {
  // PyDict_Next runs no Python code, so every walk of an exact dict is pure.
  PyObject *K, *V;
  if (!dictItemAt(Dict, Index, &K, &V))
    return nullptr;
  if (Py_TYPE(Dict) == &PyDict_Type)
    fillMemo(*Cache, Dict, dictTag(Dict), K);
  return K;
}

extern "C" PyObject *gj_rt_dict_value_fill(PyObject *Dict, Py_ssize_t Index,
                                           DictReadCache *Cache) {
  PyObject *K, *V;
  if (!dictItemAt(Dict, Index, &K, &V))
    return nullptr;
  if (Py_TYPE(Dict) == &PyDict_Type)
    fillMemo(*Cache, Dict, dictTag(Dict), V);
  return V;
}

extern "C" int gj_rt_dict_contains(PyObject *Dict, PyObject *Key,
                                   int Expected) {
  // DICT_CONTAINS: `int r = PyDict_Check(v) && PyDict_Contains(v, key);
  // return r == contains;`. The && turns PyDict_Contains's -1 (unhashable or
  // raising key) into 1, so an error counts as "contains"; we keep that
  // answer and clear the error Dynamo leaves behind.
  int R = 0;
  if (PyDict_Check(Dict)) {
    R = PyDict_Contains(Dict, Key);
    if (R < 0) {
      PyErr_Clear();
      R = 1;
    }
  }
  return R == (Expected ? 1 : 0);
}

extern "C" int gj_rt_dict_contains_fill(PyObject *Dict, PyObject *Key,
                                        int Expected, DictReadCache *Cache) {
  if (Py_TYPE(Dict) != &PyDict_Type || !PyUnicode_CheckExact(Key))
    return gj_rt_dict_contains(Dict, Key, Expected);
  uint64_t Tag = dictTag(Dict);
  int Pass = gj_rt_dict_contains(Dict, Key, Expected);
  // Only passes are memoized; the slot's Value is unused (set to the dict).
  if (Pass && pureStrProbe(Dict, Tag))
    fillMemo(*Cache, Dict, Tag, Dict);
  return Pass;
}

