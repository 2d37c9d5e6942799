//===- CPythonReads.h - Pure reads of CPython 3.11 objects ------*- C++ -*-===//
//
// Private to the Runtime library: every read of a CPython object's internals
// that the runtime helpers, dimension marking, the attribute reader
// (PythonAttr.cpp) and subtree skipping share -- a managed or module
// __dict__, a dict's PEP 509 tag and key kind, the Index-th dict item, the
// dict-read memo test. Offsets come from CPythonABI.h (abi::) and nowhere
// else, so a CPython upgrade fails there, once. None of these reads runs
// Python code or sets an error; all need the GIL.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_LIB_RUNTIME_CPYTHONREADS_H
#define GUARDJIT_LIB_RUNTIME_CPYTHONREADS_H

#include "guardjit/Runtime/CPythonABI.h"
#include "guardjit/Runtime/ReadPlans.h"

// PyDictKeysObject::dk_kind (is every key an exact str?) is only in the
// internal header; the layout is CPython 3.11's, pinned by Python.h.
#define Py_BUILD_CORE 1
#include <internal/pycore_dict.h>
#undef Py_BUILD_CORE

#include <cstdint>

namespace guardjit::cpy {

/// The pointer stored at byte `Offset` from `Obj` (negative: the
/// pre-header). `Offset` must be a field of `Obj`'s layout.
inline PyObject *fieldAt(PyObject *Obj, int64_t Offset) {
  return *reinterpret_cast<PyObject **>(reinterpret_cast<char *>(Obj) +
                                        Offset);
}

/// Whether instances of `T` keep their __dict__ in the pre-header
/// (Py_TPFLAGS_MANAGED_DICT).
inline bool hasManagedDict(PyTypeObject *T) {
  return T->tp_flags & abi::ManagedDictFlag;
}

/// For an object whose type hasManagedDict: whether its attributes still
/// live as inline values (3.11's values layout), so no dict object exists.
inline bool managedValuesInline(PyObject *Obj) {
  return fieldAt(Obj, abi::ManagedValuesOffset) != nullptr;
}

/// For an object whose type hasManagedDict: its __dict__ pointer (NULL when
/// none was created). Meaningful only when !managedValuesInline(Obj).
inline PyObject *managedDict(PyObject *Obj) {
  return fieldAt(Obj, abi::ManagedDictOffset);
}

/// The instance dict `Obj` already has, read without creating one: false
/// when a managed dict is still inline values (the caller decides what that
/// means); else true with *Dict the dict or NULL (no __dict__). Without a
/// managed dict this is tp_dictoffset arithmetic (_PyObject_GetDictPtr, no
/// side effect).
inline bool existingInstanceDict(PyObject *Obj, PyObject **Dict) {
  *Dict = nullptr;
  if (hasManagedDict(Py_TYPE(Obj))) {
    if (managedValuesInline(Obj))
      return false;
    *Dict = managedDict(Obj);
  } else if (PyObject **Ptr = _PyObject_GetDictPtr(Obj)) {
    *Dict = *Ptr;
  }
  return true;
}

/// An exact module's md_dict (NULL in a module not yet initialised).
inline PyObject *moduleDict(PyObject *Module) {
  return fieldAt(Module, abi::ModuleDictOffset);
}

/// `Dict`'s PEP 509 ma_version_tag. `Dict`'s type must be a dict type.
inline uint64_t dictTag(PyObject *Dict) {
  return reinterpret_cast<PyDictObject *>(Dict)->ma_version_tag;
}

/// Whether every key of `Dict` (a dict type) is an exact str: probing it
/// with an exact str compares str objects only and runs no user code.
inline bool strKeys(PyObject *Dict) {
  return DK_IS_UNICODE(reinterpret_cast<PyDictObject *>(Dict)->ma_keys);
}

/// Whether a probe of exact dict `Dict` for an exact-str key was pure and
/// left the dict at version `Tag` (see DictReadCache in ReadPlans.h).
inline bool pureStrProbe(PyObject *Dict, uint64_t Tag) {
  return dictTag(Dict) == Tag && strKeys(Dict);
}

/// The memo hit test the lowering inlines: same address, still an exact
/// dict (so the tag is a tag), same version.
inline bool memoHit(PyObject *Dict, const DictReadCache &Cache) {
  return Dict == Cache.Dict && Py_TYPE(Dict) == &PyDict_Type &&
         dictTag(Dict) == Cache.Tag;
}

inline void fillMemo(DictReadCache &Cache, PyObject *Dict, uint64_t Tag,
                     PyObject *Value) {
  Cache.Dict = Dict;
  Cache.Tag = Tag;
  Cache.Value = Value;
}

/// The `Index`-th live item of `Dict` in iteration (insertion) order, as
/// DictGuardManager::check_nopybind walks it: PyDict_Next with a running
/// ordinal, so deleted slots are skipped. Dynamo checks the exact type and
/// the size before walking; the recorder expresses those as separate guards,
/// so this read only has to be safe on any input. Borrowed; false (outputs
/// untouched) for a non-dict or an index out of range.
inline bool dictItemAt(PyObject *Dict, Py_ssize_t Index, PyObject **Key,
                       PyObject **Value) {
  if (!PyDict_Check(Dict) || Index < 0 || Index >= PyDict_GET_SIZE(Dict))
    return false;
  Py_ssize_t Pos = 0, Ordinal = 0;
  PyObject *K, *V;
  while (PyDict_Next(Dict, &Pos, &K, &V)) {
    if (Ordinal++ == Index) {
      *Key = K;
      *Value = V;
      return true;
    }
  }
  return false;
}

} // namespace guardjit::cpy

#endif // GUARDJIT_LIB_RUNTIME_CPYTHONREADS_H
