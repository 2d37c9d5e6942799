//===- Torch214Cases.h - Pass/fail cases of torch 2.14's kinds -*- C++ -*-===//
//
// The sibling of Torch213Cases.h for the kinds torch 2.14 added:
// COW_TENSOR_MATCH (`cow_tensor_match`) and ContextVarGetSource
// (`contextvar_get`). One table, shared by the interpreter tests
// (tests/unit/Runtime/Torch214KindsTest.cpp) and the JIT tests
// (tests/unit/JIT/Torch214KindsTest.cpp), so both check the same expected
// answers; it reuses Torch213Cases.h's Builder, Probe and prelude namespace.
//
// contextvar_get reads real contextvars.ContextVar objects (no torch). The
// COW hook is faked over `CowTensor` objects with TorchRuntime's rule
// (isinstance honouring `__class__`, then a real instance, no Python key, a
// storage, then the copy-on-write bit compared); the ATen hook itself is
// tested against torch 2.14.1 from Python
// (tests/python/test_torch214_kinds.py).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TESTS_UNIT_COMMON_TORCH214CASES_H
#define GUARDJIT_TESTS_UNIT_COMMON_TORCH214CASES_H

#include "Torch213Cases.h"

namespace guardjit::torch214 {

using torch213::Builder;
using torch213::Case;
using torch213::Probe;

inline const char *const Prelude = R"py(
import contextvars

cv = contextvars.ContextVar('cv')
cv_unset = contextvars.ContextVar('cv_unset')
cv_own = contextvars.ContextVar('cv_own', default=7)

class Getter:
    """Not a ContextVar: Dynamo's lambda calls its `get`."""
    def __init__(self, value):
        self.value = value
    def get(self, *default):
        return default[0] if default else self.value

class RaisingGetter:
    def get(self, *default):
        raise LookupError('raising get')

class LiarVar:
    """Claims to be a ContextVar; x.get still looks in its own type."""
    __class__ = property(lambda self: contextvars.ContextVar)
    def get(self, *default):
        return 5

class CowTensor:
    def __init__(self, cow=False, python_key=False):
        self.cow = cow
        self.python_key = python_key

class CowSub(CowTensor):
    pass

class NoStorage(CowTensor):
    @property
    def cow(self):
        raise RuntimeError('Cannot access storage of SparseTensorImpl')
    @cow.setter
    def cow(self, v):
        pass

class ClaimsTensor:
    """isinstance says tensor through __class__: torch unpacks garbage."""
    __class__ = property(lambda self: CowTensor)
    cow = True
    python_key = False

class RaisingClass:
    @property
    def __class__(self):
        raise RuntimeError('no class')
)py";

/// The torch 2.13 prelude namespace with the 2.14 names added (once).
inline PyObject *prelude() {
  static PyObject *NS = [] {
    PyObject *D = torch213::prelude();
    torch213::execPrelude(Prelude);
    return D;
  }();
  return NS;
}

/// TorchRuntime's cowTensorMatch over CowTensor stand-ins. It leaves an
/// isinstance error set on purpose: gj_rt_cow_tensor_match must clear it.
inline int fakeCowTensorMatch(PyObject *V, int Expected) {
  PyObject *T = torch213::fakeType("CowTensor");
  int IsTensor = PyObject_IsInstance(V, T);
  if (IsTensor <= 0 ||
      !PyObject_TypeCheck(V, reinterpret_cast<PyTypeObject *>(T)))
    return 0; // (error left set when isinstance raised)
  PyObject *Key = PyObject_GetAttrString(V, "python_key");
  int HasKey = Key ? PyObject_IsTrue(Key) : -1;
  Py_XDECREF(Key);
  if (HasKey != 0) {
    PyErr_Clear();
    return 0;
  }
  PyObject *Cow = PyObject_GetAttrString(V, "cow");
  if (!Cow) {
    PyErr_Clear(); // storage() threw: the lambda raised
    return 0;
  }
  int IsCow = PyObject_IsTrue(Cow);
  Py_DECREF(Cow);
  return IsCow == (Expected ? 1 : 0);
}

/// Torch213Cases.h's fake hooks with the COW hook.
inline const TorchHooks &fakeHooks() {
  static const TorchHooks H = [] {
    TorchHooks T = torch213::fakeHooks();
    T.cowTensorMatch = fakeCowTensorMatch;
    return T;
  }();
  return H;
}

/// A `contextvar_get` of `Parent`, with `Default` (a Python expression) as
/// its key, or none.
inline ValueId contextVarGet(Builder &B, ValueId Parent,
                             const char *Default = nullptr) {
  ValueId V = B.child(AccessorKind::ContextVarGet, Parent);
  if (Default)
    B.S->values()[V].Key = B.object(Default, ObjectKind::Constant);
  return V;
}

/// The cases; their builders and probes need prelude() (the fixtures call
/// it: cases() itself runs at static initialization, before CPython).
inline std::vector<Case> cases() {
  std::vector<Case> C;

  C.push_back({"CowTensorMatchCow",
               [](Builder &B) {
                 B.guard(GuardKind::CowTensorMatch, {B.local("t")}, InvalidId,
                         1);
               },
               {{"{'t': CowTensor(cow=True)}", true},
                {"{'t': CowSub(cow=True)}", true}, // subclasses: isinstance
                {"{'t': CowTensor(cow=False)}", false},
                {"{'t': CowTensor(cow=True, python_key=True)}", false},
                {"{'t': NoStorage()}", false},
                {"{'t': ClaimsTensor()}", false}, // torch segfaults here
                {"{'t': RaisingClass()}", false}, // error cleared
                {"{'t': 1}", false},
                {"{}", false}}});

  C.push_back({"CowTensorMatchNotCow",
               [](Builder &B) {
                 B.guard(GuardKind::CowTensorMatch, {B.local("t")}, InvalidId,
                         0);
               },
               {{"{'t': CowTensor(cow=False)}", true},
                {"{'t': CowSub()}", true},
                {"{'t': CowTensor(cow=True)}", false},
                // Unsupported is neither answer.
                {"{'t': CowTensor(python_key=True)}", false},
                {"{'t': NoStorage()}", false},
                {"{'t': None}", false}}});

  C.push_back({"ContextVarGet",
               [](Builder &B) {
                 B.guard(GuardKind::EqualsMatch,
                         {contextVarGet(B, B.local("v"))},
                         B.object("5", ObjectKind::Constant));
               },
               {{"{'v': cv}", true, "cv.set(5)"},
                {"{'v': cv}", false, "cv.set(6)"},
                {"{'v': cv_unset}", false}, // LookupError
                {"{'v': cv_own}", false},   // its own default, 7
                {"{'v': Getter(5)}", true}, // any `get`, as the lambda
                {"{'v': Getter(4)}", false},
                {"{'v': LiarVar()}", true}, // its own get: type(x), not
                                            // __class__
                {"{'v': RaisingGetter()}", false},
                {"{'v': {5: 5}}", false}, // dict.get() needs an argument
                {"{'v': 5}", false},      // no `get`
                {"{'v': cv}", true, "cv.set(5)"}}});

  C.push_back({"ContextVarGetOwnDefault",
               [](Builder &B) {
                 B.guard(GuardKind::EqualsMatch,
                         {contextVarGet(B, B.local("v"))},
                         B.object("7", ObjectKind::Constant));
               },
               {{"{'v': cv_own}", true},
                {"{'v': cv_own}", false, "_t = cv_own.set(8)"},
                {"{'v': cv_own}", true, "cv_own.reset(_t)"}}});

  C.push_back({"ContextVarGetWithDefault",
               [](Builder &B) {
                 B.guard(GuardKind::EqualsMatch,
                         {contextVarGet(B, B.local("v"), "5")},
                         B.object("5", ObjectKind::Constant));
               },
               {{"{'v': cv_unset}", true}, // the default passed
                {"{'v': cv_own}", true},   // beats the var's own default
                {"{'v': cv}", false, "cv.set(6)"},
                {"{'v': cv}", true, "cv.set(5)"},
                {"{'v': Getter(4)}", true}, // get(5) returns the default
                {"{'v': {}}", false},       // dict.get(5) is None
                {"{'v': RaisingGetter()}", false},
                {"{'v': 3}", false}}});

  C.push_back({"ContextVarGetDefaultNone",
               [](Builder &B) {
                 B.guard(GuardKind::NoneMatch,
                         {contextVarGet(B, B.local("v"), "None")});
               },
               {{"{'v': cv_unset}", true}, // get(None) on an unset var
                {"{'v': cv_own}", true},
                {"{'v': cv}", false, "cv.set(5)"},
                {"{'v': {}}", true}}}); // dict.get(None) is None
  return C;
}

/// torch213::prepareProbe, with the 2.14 names in the namespace.
inline void applyProbe(const Probe &P) {
  prelude();
  torch213::prepareProbe(P);
}

} // namespace guardjit::torch214

#endif // GUARDJIT_TESTS_UNIT_COMMON_TORCH214CASES_H
