//===- DimensionMarking.cpp - DIMENSION_DYNAMIC_MARKING_GUARD -------------===//
//
// The payload of DimensionMarking.h (built by BoundGuardSet::bind) and the
// helper that checks it, gj_rt_dimension_marking.
//
//===----------------------------------------------------------------------===//
#include "DimensionMarking.h"

#include "CPythonReads.h"

using namespace guardjit;
using namespace guardjit::cpy;

namespace {
/// Interned attribute/method names, created on first use under the GIL and
/// leaked (like Dynamo's static interned strings).
struct MarkingNames {
  PyObject *Gate = nullptr;     // "_has_dynamo_dim_marking"
  PyObject *Issubset = nullptr; // "issubset"
};
} // namespace

static const MarkingNames *markingNames() {
  static MarkingNames Names = [] {
    MarkingNames N;
    N.Gate = PyUnicode_InternFromString("_has_dynamo_dim_marking");
    N.Issubset = PyUnicode_InternFromString("issubset");
    return N;
  }();
  if (!Names.Gate || !Names.Issubset) {
    PyErr_Clear();
    return nullptr;
  }
  return &Names;
}

/// True when `Value` certainly has no attribute `Gate`, decided exactly as
/// PyObject_HasAttr decides it for a type with the generic getattr
/// (_PyObject_GenericGetAttrWithDict with suppress=1), without creating or
/// fetching an exception: no class attribute anywhere in the MRO, then no
/// instance-dict entry. False means "not decided here": the caller runs the
/// full PyObject_HasAttr.
///
/// The class-attribute half is memoized per guard by (type, tp_version_tag),
/// the key of CPython's own attribute cache: a valid tag is assigned from a
/// global counter, and every change to the type or to any class in its MRO
/// (type_modified) clears Py_TPFLAGS_VALID_VERSION_TAG and drops the tag, so
/// a live type at the memo's address with the memo's valid tag is the same
/// type in the same state.
static bool surelyHasNoAttr(PyObject *Value, PyObject *Gate,
                            const DimensionMarkingSlot &Slot) {
  const DimensionMarkingPayload &P = *Slot.Spec;
  PyTypeObject *Tp = Py_TYPE(Value);
  if (Tp->tp_getattro != PyObject_GenericGetAttr)
    return false;
  bool ValidTag = Tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG;
  if (!(ValidTag && ((Tp == P.GateFreeType[0] &&
                      Tp->tp_version_tag == P.GateFreeTag[0]) ||
                     (Tp == P.GateFreeType[1] &&
                      Tp->tp_version_tag == P.GateFreeTag[1])))) {
    // _PyType_Lookup raises nothing (it clears lookup errors itself).
    if (_PyType_Lookup(Tp, Gate))
      return false; // a class attribute or descriptor: the slow path decides
    if (Tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) {
      // The older entry goes; the newest is always entry 0.
      P.GateFreeType[1] = P.GateFreeType[0];
      P.GateFreeTag[1] = P.GateFreeTag[0];
      P.GateFreeType[0] = Tp;
      P.GateFreeTag[0] = Tp->tp_version_tag;
    }
  }
  PyObject *Dict;
  if (!existingInstanceDict(Value, &Dict))
    return false; // inline values: leave them to CPython
  if (!Dict)
    return true;
  // The last gate-free instance dict, unchanged (see DictReadCache): the
  // probe below would miss again. Tensors passed by one guard are usually
  // the same object call after call, with a __dict__ nobody writes.
  DictReadCache &Memo = Slot.GateFreeDict;
  if (memoHit(Dict, Memo))
    return true;
  uint64_t Tag = dictTag(Dict);
  Py_INCREF(Dict); // as the generic getattr does: a user __eq__ may drop it
  PyObject *X = PyDict_GetItemWithError(Dict, Gate);
  if (X) {
    Py_DECREF(Dict);
    return false;
  }
  if (PyErr_Occurred()) {
    // A raising lookup makes PyObject_HasAttr answer 0 as well.
    PyErr_Clear();
  } else if (Py_TYPE(Dict) == &PyDict_Type && pureStrProbe(Dict, Tag)) {
    fillMemo(Memo, Dict, Tag, nullptr);
  }
  Py_DECREF(Dict);
  return true;
}

extern "C" int gj_rt_dimension_marking(PyObject *Value, const void *Payload) {
  // The C++ source of this 2.13 guard is not available; the order of reads
  // and every rule below were established by experiments against the 2.13
  // wheel (attribute lookups logged through __getattribute__):
  //   1. no `_has_dynamo_dim_marking` attribute (its value is irrelevant)
  //      -> pass;
  //   2. no expected and no dependent attrs -> fail (compiled unmarked);
  //   3. each expected attr, if readable: attr.issubset(S) must be truthy;
  //      an unreadable attr is "unspecified" and passes;
  //   4. each absent attr must not exist (PyObject_HasAttr);
  //   5. each dependent attr, when its gate exists:
  //      getattr(v, name, None) == expected.
  // Dynamo raises (TORCH_CHECK) when issubset cannot be called; that is a
  // failed check here.
  const auto *Slot = static_cast<const DimensionMarkingSlot *>(Payload);
  const MarkingNames *Names = markingNames();
  if (!Slot || !Slot->Spec || !Names)
    return 0;
  const DimensionMarkingPayload *P = Slot->Spec;
  if (surelyHasNoAttr(Value, Names->Gate, *Slot) ||
      !PyObject_HasAttr(Value, Names->Gate))
    return 1;
  if (P->ExpectedAttrs.empty() && P->DependentAttrs.empty())
    return 0;

  for (const DimensionMarkingPayload::Expected &E : P->ExpectedAttrs) {
    PyObject *Attr = PyObject_GetAttr(Value, E.Name);
    if (!Attr) {
      PyErr_Clear();
      continue;
    }
    PyObject *R = PyObject_CallMethodOneArg(Attr, Names->Issubset, E.Set);
    Py_DECREF(Attr);
    if (!R) {
      PyErr_Clear();
      return 0;
    }
    int T = PyObject_IsTrue(R);
    Py_DECREF(R);
    if (T < 0) {
      // As in LAMBDA_GUARD, Dynamo's bool conversion turns -1 into true.
      PyErr_Clear();
      T = 1;
    }
    if (!T)
      return 0;
  }

  for (PyObject *Name : P->AbsentAttrs)
    if (PyObject_HasAttr(Value, Name))
      return 0;

  for (const DimensionMarkingPayload::Dependent &D : P->DependentAttrs) {
    if (!PyObject_HasAttr(Value, D.Gate))
      continue;
    PyObject *Attr = PyObject_GetAttr(Value, D.Name);
    if (!Attr) {
      PyErr_Clear();
      Attr = Py_NewRef(Py_None);
    }
    int R = PyObject_RichCompareBool(Attr, D.Expected, Py_EQ);
    Py_DECREF(Attr);
    if (R < 0) {
      PyErr_Clear();
      return 0;
    }
    if (!R)
      return 0;
  }
  return 1;
}

DimensionMarkingPayload *guardjit::prepareDimensionMarking(PyObject *Spec,
                                                           std::string *Error) {
  auto Fail = [&](const char *Msg) -> DimensionMarkingPayload * {
    if (Error)
      *Error = Msg;
    return nullptr;
  };
  if (!Spec || !PyTuple_Check(Spec) || PyTuple_GET_SIZE(Spec) != 3)
    return Fail("expected a tuple (expected_attrs, absent_attrs, "
                "dependent_attrs)");
  PyObject *Expected = PyTuple_GET_ITEM(Spec, 0);
  PyObject *Absent = PyTuple_GET_ITEM(Spec, 1);
  PyObject *Dependent = PyTuple_GET_ITEM(Spec, 2);
  if (!PyDict_Check(Expected))
    return Fail("expected_attrs must be a dict");
  if (!PyList_Check(Absent) && !PyTuple_Check(Absent))
    return Fail("absent_attrs must be a list or tuple");
  if (!PyDict_Check(Dependent))
    return Fail("dependent_attrs must be a dict");

  auto *P = new DimensionMarkingPayload();
  Py_ssize_t Pos = 0;
  PyObject *K, *V;
  while (PyDict_Next(Expected, &Pos, &K, &V)) {
    if (!PyUnicode_Check(K)) {
      releaseDimensionMarking(P);
      return Fail("expected_attrs keys must be str");
    }
    P->ExpectedAttrs.push_back({Py_NewRef(K), Py_NewRef(V)});
  }
  Py_ssize_t NumAbsent = PySequence_Fast_GET_SIZE(Absent);
  for (Py_ssize_t I = 0; I < NumAbsent; ++I) {
    PyObject *Name = PySequence_Fast_GET_ITEM(Absent, I);
    if (!PyUnicode_Check(Name)) {
      releaseDimensionMarking(P);
      return Fail("absent_attrs items must be str");
    }
    P->AbsentAttrs.push_back(Py_NewRef(Name));
  }
  Pos = 0;
  while (PyDict_Next(Dependent, &Pos, &K, &V)) {
    if (!PyUnicode_Check(K) || !PyTuple_Check(V) || PyTuple_GET_SIZE(V) != 2 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(V, 1))) {
      releaseDimensionMarking(P);
      return Fail("dependent_attrs must map str to (expected, gate: str)");
    }
    P->DependentAttrs.push_back({Py_NewRef(K),
                                 Py_NewRef(PyTuple_GET_ITEM(V, 0)),
                                 Py_NewRef(PyTuple_GET_ITEM(V, 1))});
  }
  return P;
}

bool guardjit::sameUnmarkedSpec(const DimensionMarkingPayload &A,
                                const DimensionMarkingPayload &B) {
  if (!A.ExpectedAttrs.empty() || !A.DependentAttrs.empty() ||
      !B.ExpectedAttrs.empty() || !B.DependentAttrs.empty() ||
      A.AbsentAttrs.size() != B.AbsentAttrs.size())
    return false;
  for (size_t I = 0; I < A.AbsentAttrs.size(); ++I) {
    PyObject *X = A.AbsentAttrs[I], *Y = B.AbsentAttrs[I];
    // Exact strs compare without user code; equal strs are the same name.
    if (!PyUnicode_CheckExact(X) || !PyUnicode_CheckExact(Y) ||
        PyUnicode_Compare(X, Y) != 0)
      return false;
  }
  return true;
}

void guardjit::releaseDimensionMarking(DimensionMarkingPayload *P) {
  if (!P || --P->Refs > 0)
    return;
  for (auto &E : P->ExpectedAttrs) {
    Py_DECREF(E.Name);
    Py_DECREF(E.Set);
  }
  for (PyObject *Name : P->AbsentAttrs)
    Py_DECREF(Name);
  for (auto &D : P->DependentAttrs) {
    Py_DECREF(D.Name);
    Py_DECREF(D.Expected);
    Py_DECREF(D.Gate);
  }
  delete P;
}
