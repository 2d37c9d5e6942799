//===- SkipPlanReads.h - Reads shared by SkipPlan's two halves --*- C++ -*-===//
//
// Private to the Runtime library: how one stable value of a SkipPlan is read
// (SkipPlan::Slot) and the pure reads behind it, used at bind time by the
// plan builder (SubtreeSkip.cpp) and on every call by record() and
// validate() (SkipValidation.cpp). See SubtreeSkip.h for why they are sound.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_LIB_RUNTIME_SKIPPLANREADS_H
#define GUARDJIT_LIB_RUNTIME_SKIPPLANREADS_H

#include "CPythonReads.h"
#include "guardjit/Runtime/Python.h"
#include "guardjit/Runtime/PythonAttr.h"
#include "guardjit/Runtime/SubtreeSkip.h"

#include <array>
#include <cstdint>
#include <cstring>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030C0000
#error "SubtreeSkip reads CPython 3.11's ma_version_tag (3.12: dict watchers)"
#endif

namespace guardjit {

struct SkipPlan::Slot {
  enum Kind : uint8_t {
    Anchor,    ///< frame_locals[Key]: read every call (LoadLocal step)
    Const,     ///< an object-table dict (f_globals), held by the bound set
    DictItem,  ///< Parent[Key], Parent a dict
    DictKey,   ///< the Index-th key of dict Parent
    DictValue, ///< the Index-th value of dict Parent
    InstanceDict, ///< Parent's __dict__ (NULL allowed for hidden slots)
    Attr,      ///< Parent.Key found in its instance dict or its type
    TypeOf,    ///< type(Parent)
    TupleItem, ///< Parent[Index], Parent an exact tuple
    FuncField, ///< the PyObject* at Offset of exact function Parent
    TypeField, ///< the PyObject* at Offset of type Parent
    ModuleListItem, ///< Parent[Index] through torch's ModuleList.__getitem__,
                    ///< Hidden the slot of Parent's `_modules` dict
    AnchorItem, ///< Parent[Index] (an exact tuple) or Parent[Key] (an exact
                ///< str-keyed dict), Parent an anchor: read every call
    FieldAttr, ///< the field at Offset of exact cell or function Parent,
               ///< read as one of their data descriptors
    ConfigMap,  ///< the attribute_map a config read of Parent consults
                ///< (knownConfigMap), Hidden its instance dict slot
  };
  Kind K = Anchor;
  uint32_t Parent = 0; ///< slot index
  uint32_t Hidden = 0; ///< Attr: the slot of Parent's instance dict
  bool Nullable = false; ///< a hidden instance dict may be absent
  /// Attr: found by plainRead at build time, with the steps of this
  /// registered-function kind (or None: the generic getattr) on Parent; a
  /// record reads it the same way only while Parent's kind is still this.
  bool ViaPlainRead = false;
  KnownAttrKind PlainKind = KnownAttrKind::None;
  PyObject *Key = nullptr;
  int64_t Index = -1;
  uint32_t Offset = 0;
};

namespace skip {

/// The instance dict of `Obj`: what PyObject_GenericGetDict returns. With
/// `Materialize` a managed dict still in the 3.11 values layout is turned
/// into a dict first, as `obj.__dict__` does (an allocation, no Python code);
/// without it (validation) such an object reads as "no dict", which never
/// matches a recorded dict. Sets *Ok false for layouts this does not read
/// (a negative tp_dictoffset).
inline PyObject *instanceDict(PyObject *Obj, bool Materialize, bool *Ok) {
  PyTypeObject *T = Py_TYPE(Obj);
  *Ok = true;
  if (cpy::hasManagedDict(T)) {
    if (!cpy::managedValuesInline(Obj)) // already a dict (or none)
      return cpy::managedDict(Obj);
    if (!Materialize)
      return nullptr;
    PyObject *D = PyObject_GenericGetDict(Obj, nullptr);
    if (!D) {
      PyErr_Clear();
      *Ok = false;
      return nullptr;
    }
    Py_DECREF(D); // the object owns it now
    return D;
  }
  if (T->tp_dictoffset == 0)
    return nullptr;
  if (T->tp_dictoffset < 0) {
    *Ok = false;
    return nullptr;
  }
  return cpy::fieldAt(Obj, T->tp_dictoffset);
}

/// tp_getattro of a class defining __getattr__ (slot_tp_getattr_hook, which
/// CPython does not export), found once from a probe class.
inline getattrofunc getattrHook() {
  static getattrofunc Hook = [] () -> getattrofunc {
    PyObject *Ns = Py_BuildValue("{s:O}", "__getattr__",
                                 reinterpret_cast<PyObject *>(&PyType_Type));
    if (!Ns) {
      PyErr_Clear();
      return nullptr;
    }
    PyObject *Cls = PyObject_CallFunction(
        reinterpret_cast<PyObject *>(&PyType_Type), "s()O", "_gj_probe", Ns);
    Py_DECREF(Ns);
    if (!Cls) {
      PyErr_Clear();
      return nullptr;
    }
    getattrofunc F = reinterpret_cast<PyTypeObject *>(Cls)->tp_getattro;
    Py_DECREF(Cls);
    return F;
  }();
  return Hook;
}

/// Whether `T`'s attribute reads of a name found in the instance dict or as
/// a plain class attribute return exactly that object without running
/// Python: PyObject_GenericGetAttr, module_getattro, or
/// slot_tp_getattr_hook with object.__getattribute__ (its __getattr__ runs
/// only when the name is missing). Valid while T's version tag holds.
inline bool genericGetattr(PyTypeObject *T) {
  getattrofunc G = T->tp_getattro;
  if (G == PyObject_GenericGetAttr || G == PyModule_Type.tp_getattro)
    return true;
  if (G != getattrHook() || !G)
    return false;
  static PyObject *Name = PyUnicode_InternFromString("__getattribute__");
  PyObject *GA = _PyType_Lookup(T, Name);
  return GA && Py_IS_TYPE(GA, &PyWrapperDescr_Type) &&
         reinterpret_cast<PyWrapperDescrObject *>(GA)->d_wrapped ==
             reinterpret_cast<void *>(PyObject_GenericGetAttr);
}

/// PyObject_GenericGetAttr(Obj, Name) when the answer is a plain object
/// from the instance dict `Dict` (may be NULL) or a non-descriptor class
/// attribute; nullptr otherwise (descriptor, missing, odd getattro).
inline PyObject *pureAttr(PyObject *Obj, PyObject *Name, PyObject *Dict) {
  PyTypeObject *T = Py_TYPE(Obj);
  if (!PyUnicode_CheckExact(Name) || !genericGetattr(T))
    return nullptr;
  PyObject *Descr = _PyType_Lookup(T, Name); // borrowed, runs no Python
  // A descriptor (method, property...) is not a plain read. Nor is an object
  // of a heap type found on the type: its class can gain __get__/__set__
  // later (then it wins over the instance dict), and no step watches that
  // class's version. A static type cannot change.
  if (Descr && (Py_TYPE(Descr)->tp_descr_get ||
                (Py_TYPE(Descr)->tp_flags & Py_TPFLAGS_HEAPTYPE)))
    return nullptr;
  if (Dict) {
    if (!PyDict_CheckExact(Dict))
      return nullptr;
    if (PyObject *V = PyDict_GetItem(Dict, Name))
      return V;
  }
  return Descr;
}

/// Whether `T` has a valid, nonzero tp_version_tag.
inline bool versionTagValid(PyTypeObject *T) {
  return (T->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && T->tp_version_tag;
}


/// torch.nn.ModuleList's __getitem__, _get_abs_string_index and __len__, as
/// registered (strong references) by registerModuleListGetItem.
inline PyObject *ModuleListFns[3] = {nullptr, nullptr, nullptr};

/// Whether `T` indexes with torch's reviewed ModuleList.__getitem__: for an
/// int `idx`, `self._modules[str(idx mod len(self._modules))]`, no Python
/// needed (valid while T's version tag holds).
inline bool moduleListIndexing(PyTypeObject *T) {
  static PyObject *Names[3] = {
      PyUnicode_InternFromString("__getitem__"),
      PyUnicode_InternFromString("_get_abs_string_index"),
      PyUnicode_InternFromString("__len__")};
  if (!ModuleListFns[0] || !genericGetattr(T))
    return false;
  for (int I = 0; I < 3; ++I)
    if (_PyType_Lookup(T, Names[I]) != ModuleListFns[I])
      return false;
  return true;
}

/// The interned str "_modules".
inline PyObject *modulesName() {
  static PyObject *Name = PyUnicode_InternFromString("_modules");
  return Name;
}

/// The dicts nn.Module.__getattr__ searches, in its order (interned).
inline const std::array<PyObject *, 3> &moduleDictNames() {
  static const std::array<PyObject *, 3> Names = {
      PyUnicode_InternFromString("_parameters"),
      PyUnicode_InternFromString("_buffers"), modulesName()};
  return Names;
}

/// The item an AnchorItem slot or LoadItem step reads from `Container`:
/// Container[Index] of an exact tuple, Container[Key] of an exact dict whose
/// keys are all str (the probe runs no __eq__), or nullptr.
inline PyObject *anchorItem(PyObject *Container, PyObject *Key,
                            int64_t Index) {
  if (Key) {
    if (!PyDict_CheckExact(Container) || !cpy::strKeys(Container))
      return nullptr;
    return PyDict_GetItem(Container, Key);
  }
  if (!PyTuple_CheckExact(Container) || Index < 0 ||
      Index >= PyTuple_GET_SIZE(Container))
    return nullptr;
  return PyTuple_GET_ITEM(Container, Index);
}


/// `Modules[str(Index)]` after ModuleList._get_abs_string_index's range
/// check and wrap, or nullptr (IndexError, missing key).
inline PyObject *moduleListItem(PyObject *Modules, int64_t Index) {
  if (!Modules || !PyDict_CheckExact(Modules))
    return nullptr;
  Py_ssize_t N = PyDict_GET_SIZE(Modules);
  if (Index < -N || Index >= N)
    return nullptr;
  if (Index < 0)
    Index += N;
  PyObject *Key = PyUnicode_FromFormat("%lld", static_cast<long long>(Index));
  if (!Key) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject *X = PyDict_GetItem(Modules, Key);
  Py_DECREF(Key);
  return X;
}

/// A constant whose value can never change in place: EQUALS_MATCH on the
/// same object then always gives the same answer.
inline bool deeplyImmutable(PyObject *C, int Depth = 0) {
  if (C == Py_None || PyBool_Check(C) || PyLong_CheckExact(C) ||
      PyFloat_CheckExact(C) || PyUnicode_CheckExact(C) ||
      PyBytes_CheckExact(C) || PyComplex_CheckExact(C))
    return true;
  // torch's value types: static C types with read-only fields whose
  // equality runs no Python (torch/csrc/Dtype.cpp, Device.cpp, Layout.cpp,
  // MemoryFormat.cpp). A heap type of the same name is not one of them.
  PyTypeObject *T = Py_TYPE(C);
  if (!(T->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
    static const char *const TorchValueTypes[] = {
        "torch.dtype", "torch.device", "torch.layout", "torch.memory_format",
        "torch.qscheme"};
    for (const char *Name : TorchValueTypes)
      if (std::strcmp(T->tp_name, Name) == 0)
        return true;
  }
  if (PyTuple_CheckExact(C) && Depth < 4) {
    for (Py_ssize_t I = 0; I < PyTuple_GET_SIZE(C); ++I)
      if (!deeplyImmutable(PyTuple_GET_ITEM(C, I), Depth + 1))
        return false;
    return true;
  }
  return false;
}

} // namespace skip
} // namespace guardjit

#endif // GUARDJIT_LIB_RUNTIME_SKIPPLANREADS_H
