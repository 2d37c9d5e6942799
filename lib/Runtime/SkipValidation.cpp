//===- SkipValidation.cpp - SkipPlan's hot path: record and validate ------===//
//
// What runs on every call of a check with a SkipPlan (SubtreeSkip.h):
// validate() before it, record() after a full check passed, and the pure
// reads both share with the plan builder (SkipPlanReads.h). The plan itself
// is built once, at bind time, in SubtreeSkip.cpp.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/SubtreeSkip.h"

#include "CPythonReads.h"
#include "SkipPlanReads.h"

#include "guardjit/Runtime/PythonAttr.h"

#include <cassert>
#include <cstddef>
#include <cstring>

using namespace guardjit;
using namespace guardjit::skip;

//===----------------------------------------------------------------------===//
// record() and validate()
//===----------------------------------------------------------------------===//

SkipPlan::~SkipPlan() {
  for (PyObject *O : Held)
    Py_XDECREF(O);
}

void SkipPlan::attach(BoundGuardSet &BoundResidual) {
  assert(BoundResidual.numRecordedSlots() <= Slots.size());
  BoundResidual.reserveRecordedSlots(Slots.size());
  Table = BoundResidual.recordedSlots();
  Valid = false;
}

bool SkipPlan::readSlot(size_t I, PyObject *FrameLocals) {
  const Slot &X = Slots[I];
  PyObject *P = X.K == Slot::Anchor || X.K == Slot::Const ? nullptr
                                                          : Table[X.Parent];
  PyObject *R = nullptr;
  bool Ok = true;
  switch (X.K) {
  case Slot::Anchor:
    R = PyDict_GetItem(FrameLocals, X.Key);
    break;
  case Slot::Const:
    R = X.Key;
    break;
  case Slot::DictItem:
    if (PyDict_Check(P)) // a tag step on P follows: an exact dict then
      R = PyDict_GetItem(P, X.Key);
    break;
  case Slot::DictKey:
  case Slot::DictValue: {
    PyObject *K, *V;
    if (cpy::dictItemAt(P, X.Index, &K, &V))
      R = X.K == Slot::DictKey ? K : V;
    break;
  }
  case Slot::InstanceDict:
    R = instanceDict(P, /*Materialize=*/true, &Ok);
    if (!Ok || (R && !PyDict_Check(R)))
      return false;
    Table[I] = R;
    return R || X.Nullable;
  case Slot::Attr:
    // _PyType_Lookup assigns the version tag the TypeTag step records.
    // A value plainRead found at build is read so again only while the
    // owner's kind is the one whose steps the plan holds (SubtreeSkip.cpp).
    R = pureAttr(P, X.Key, Table[X.Hidden]);
    if (!R && X.ViaPlainRead && knownAttrKind(P) == X.PlainKind &&
        plainRead(P, X.Key, Table[X.Hidden], &R) != AttrOutcome::Found)
      R = nullptr;
    if (!versionTagValid(Py_TYPE(P)))
      R = nullptr;
    break;
  case Slot::AnchorItem:
    R = anchorItem(P, X.Key, X.Index);
    break;
  case Slot::ConfigMap:
    R = knownConfigMap(P, Table[X.Hidden]);
    break;
  case Slot::ModuleListItem:
    if (moduleListIndexing(Py_TYPE(P)) && versionTagValid(Py_TYPE(P)))
      R = moduleListItem(Table[X.Hidden], X.Index);
    break;
  case Slot::TypeOf:
    R = reinterpret_cast<PyObject *>(Py_TYPE(P));
    break;
  case Slot::TupleItem:
    if (PyTuple_CheckExact(P) && X.Index >= 0 &&
        X.Index < PyTuple_GET_SIZE(P))
      R = PyTuple_GET_ITEM(P, X.Index);
    break;
  case Slot::FuncField:
    if (Py_IS_TYPE(P, &PyFunction_Type))
      R = cpy::fieldAt(P, X.Offset);
    break;
  case Slot::TypeField:
    if (PyType_Check(P))
      R = cpy::fieldAt(P, X.Offset);
    break;
  case Slot::FieldAttr:
    if (Py_IS_TYPE(P, &PyCell_Type) || Py_IS_TYPE(P, &PyFunction_Type))
      R = cpy::fieldAt(P, X.Offset);
    break;
  }
  Table[I] = R;
  return R != nullptr;
}

bool SkipPlan::record(PyObject *FrameLocals) {
  Valid = false;
  if (!Table || !PyDict_CheckExact(FrameLocals))
    return false;
  // The previous snapshot's objects are released only after this one is
  // taken (or has failed): a release may free an object whose finalizer runs
  // Python, which must not happen between the full check and the reads below.
  std::vector<PyObject *> Old;
  Old.swap(Held);
  struct ReleaseOld {
    std::vector<PyObject *> &V;
    ~ReleaseOld() {
      for (PyObject *O : V)
        Py_XDECREF(O);
    }
  } Release{Old};
  for (size_t I = 0; I < Slots.size(); ++I)
    if (!readSlot(I, FrameLocals)) {
      ++Stats.RecordFailures;
      return false;
    }
  // An implied EQUALS_MATCH passed on this object; it keeps passing only if
  // the object cannot change in place. Its exact type is the constant's, but
  // a tuple equal to `(1, 1)` may hold a 0-d tensor that `fill_` changes with
  // no tag (`conv.padding = (torch.tensor(1), 1)`).
  for (uint32_t I : ImmutableSlots)
    if (!deeplyImmutable(Table[I])) {
      ++Stats.RecordFailures;
      return false;
    }
  // A guard implied because an attribute was missing holds for the objects
  // recorded now only if it is missing on them, read the way the plan's
  // steps pin (a class that gained __getattr__, a tensor marked dynamic
  // since the plan was built: no snapshot).
  for (const MissingAttr &M : MissingAttrs) {
    PyObject *Found = nullptr;
    if (knownAttrKind(Table[M.Slot]) != M.Kind ||
        plainRead(Table[M.Slot], M.Name, Table[M.Dict], &Found) !=
            AttrOutcome::Missing) {
      ++Stats.RecordFailures;
      return false;
    }
  }
  for (SkipStep &St : Steps) {
    PyObject *O = Table[St.Src];
    switch (St.K) {
    case SkipStep::LoadLocal:
    case SkipStep::LoadItem:
      break;
    case SkipStep::KnownType:
      if (knownAttrKind(O) != St.Known) {
        ++Stats.RecordFailures;
        return false;
      }
      break;
    case SkipStep::DictOf:
      St.Expect = Table[St.Dst];
      St.Type = Py_TYPE(O);
      if (St.WithTag && St.Expect) {
        PyObject *D = St.Expect;
        if (!PyDict_Check(D) ||
            cpy::dictTag(D) == 0) {
          ++Stats.RecordFailures;
          return false;
        }
        St.DictType = Py_TYPE(D);
        St.Version = cpy::dictTag(D);
      }
      break;
    case SkipStep::Field:
      St.Expect = Table[St.Dst];
      St.Type = Py_TYPE(O); // a live anchor may be another object next time
      // Held, so that no new object can take its address while the owner's
      // field is compared with it (the file comment).
      Py_XINCREF(St.Expect);
      Held.push_back(St.Expect);
      break;
    case SkipStep::TypeIs:
      St.Type = reinterpret_cast<PyTypeObject *>(Table[St.Dst]);
      break;
    case SkipStep::Tag:
      if (!O) // an absent hidden instance dict: DictOf checks that
        break;
      if (!PyDict_Check(O) ||
          cpy::dictTag(O) == 0) {
        ++Stats.RecordFailures;
        return false;
      }
      St.Type = Py_TYPE(O);
      St.Version = cpy::dictTag(O);
      break;
    case SkipStep::TypeTag:
      St.Type = Py_TYPE(O);
      if (!versionTagValid(St.Type)) {
        ++Stats.RecordFailures;
        return false;
      }
      St.Version = St.Type->tp_version_tag;
      break;
    }
  }
  ++Stats.Records;
  Valid = true;
  return true;
}

bool SkipPlan::validate(PyObject *FrameLocals) {
  if (!Valid)
    return false;
  PyObject **T = Table;
  for (const SkipStep &St : Steps) {
    switch (St.K) {
    case SkipStep::LoadLocal: {
      PyObject *X = PyDict_GetItem(FrameLocals, St.Key);
      if (!X)
        return false;
      T[St.Dst] = X;
      break;
    }
    case SkipStep::LoadItem: {
      PyObject *X = anchorItem(T[St.Src], St.Key, St.Offset);
      if (!X)
        return false;
      T[St.Dst] = X;
      break;
    }
    case SkipStep::KnownType:
      if (knownAttrKind(T[St.Src]) != St.Known)
        return false;
      break;
    case SkipStep::DictOf: {
      PyObject *O = T[St.Src];
      if (Py_TYPE(O) != St.Type)
        return false;
      bool Ok;
      PyObject *D = instanceDict(O, /*Materialize=*/false, &Ok);
      if (D != St.Expect || !Ok)
        return false;
      if (St.WithTag && D &&
          (Py_TYPE(D) != St.DictType ||
           cpy::dictTag(D) != St.Version))
        return false;
      break;
    }
    case SkipStep::Tag: {
      PyObject *O = T[St.Src];
      if (O && (Py_TYPE(O) != St.Type || cpy::dictTag(O) != St.Version))
        return false;
      break;
    }
    case SkipStep::TypeIs:
      if (Py_TYPE(T[St.Src]) != St.Type)
        return false;
      break;
    case SkipStep::TypeTag: {
      PyTypeObject *Ty = Py_TYPE(T[St.Src]);
      if (Ty != St.Type || !versionTagValid(Ty) ||
          Ty->tp_version_tag != St.Version)
        return false;
      break;
    }
    case SkipStep::Field:
      // The type first: the offset is only a field of that layout.
      if (Py_TYPE(T[St.Src]) != St.Type ||
          cpy::fieldAt(T[St.Src], St.Offset) != St.Expect)
        return false;
      break;
    }
  }
  return true;
}

bool guardjit::registerModuleListGetItem(PyObject *GetItem, PyObject *AbsIndex,
                                         PyObject *Len, std::string *Error) {
  PyObject *Fns[3] = {GetItem, AbsIndex, Len};
  for (PyObject *F : Fns)
    if (!F || !PyFunction_Check(F)) {
      *Error = "ModuleList functions must be Python functions";
      return false;
    }
  for (int I = 0; I < 3; ++I) {
    Py_INCREF(Fns[I]);
    Py_XSETREF(ModuleListFns[I], Fns[I]);
  }
  return true;
}

void guardjit::unregisterModuleListGetItem() {
  for (PyObject *&F : ModuleListFns)
    Py_CLEAR(F);
}
