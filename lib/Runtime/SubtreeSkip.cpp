//===- SubtreeSkip.cpp - Sound skipping of unchanged subtrees ------------===//
//
// The plan builder, run once at bind time; the hot path (record() and
// validate()) is SkipValidation.cpp, the reads both use SkipPlanReads.h.
//
// SkipPlan::build runs four steps over the full set F:
//  1. classify: which values are anchors (frame locals, f_globals) and which
//     are stable (a pure read of a stable or anchor parent), probing the
//     compile-time frame locals; which stable values need a dict-tag step
//     (they have stable dict items or dict guards) or an attribute step
//     (they have stable attributes: type version + instance dict + its tag);
//  2. lay out the recorded-object table (one slot per stable value, plus a
//     hidden slot for the instance dict behind attribute reads) and the
//     validation steps in tree order;
//  3. build R: every guard the steps imply is dropped, the others are copied
//     with stable operands read from their slots, except the guards that may
//     run Python (or read through a read that may), which go to the prelude
//     with F's own reads (SubtreeSkip.h: validation and R must be atomic);
//  4. decline when nothing is skipped or the cost model says the plan does
//     not pay.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/SubtreeSkip.h"

#include "CPythonReads.h"
#include "SkipPlanReads.h"

#include "guardjit/Runtime/PythonAttr.h"

#include <cassert>
#include <cstddef>
#include <cstring>
#include <unordered_map>

using namespace guardjit;
using namespace guardjit::skip;

namespace {

/// The PyFunctionObject field a function accessor reads.
uint32_t funcFieldOffset(AccessorKind K) {
  switch (K) {
  case AccessorKind::Code:
    return offsetof(PyFunctionObject, func_code);
  case AccessorKind::FuncDefaults:
    return offsetof(PyFunctionObject, func_defaults);
  case AccessorKind::FuncKwDefaults:
    return offsetof(PyFunctionObject, func_kwdefaults);
  default:
    assert(K == AccessorKind::Closure);
    return offsetof(PyFunctionObject, func_closure);
  }
}

/// The field behind attribute `Name` of an exact cell or function, whose
/// type serves it with a data descriptor (getset or member: the instance
/// dict never shadows it) that returns the field itself; -1 for others.
int64_t fieldAttrOffset(PyObject *Owner, PyObject *Name) {
  if (!PyUnicode_CheckExact(Name))
    return -1;
  struct Entry {
    const char *Name;
    int64_t Offset;
  };
  static const Entry Cell[] = {{"cell_contents", offsetof(PyCellObject, ob_ref)}};
  static const Entry Function[] = {
      {"__name__", offsetof(PyFunctionObject, func_name)},
      {"__qualname__", offsetof(PyFunctionObject, func_qualname)},
      {"__module__", offsetof(PyFunctionObject, func_module)},
      {"__code__", offsetof(PyFunctionObject, func_code)},
      {"__defaults__", offsetof(PyFunctionObject, func_defaults)},
      {"__kwdefaults__", offsetof(PyFunctionObject, func_kwdefaults)},
      {"__closure__", offsetof(PyFunctionObject, func_closure)},
      {"__globals__", offsetof(PyFunctionObject, func_globals)}};
  auto Find = [&](const auto &Table) -> int64_t {
    for (const Entry &E : Table)
      if (PyUnicode_CompareWithASCIIString(Name, E.Name) == 0)
        return E.Offset;
    return -1;
  };
  if (Py_IS_TYPE(Owner, &PyCell_Type))
    return Find(Cell);
  if (Py_IS_TYPE(Owner, &PyFunction_Type))
    return Find(Function);
  return -1;
}

/// The non-negative tuple index a TupleGetItem reads, or a GetItem with an
/// int key in [0, 2^62); -1 otherwise.
int64_t tupleIndex(const Value &V, PyObject *const *Objs) {
  if (V.Kind == AccessorKind::TupleGetItem)
    return V.Index;
  if (V.Kind != AccessorKind::GetItem || V.Key == InvalidId ||
      !PyLong_CheckExact(Objs[V.Key]))
    return -1;
  int Overflow = 0;
  long long K = PyLong_AsLongLongAndOverflow(Objs[V.Key], &Overflow);
  if (Overflow || K < 0 || K >= (int64_t(1) << 62)) {
    PyErr_Clear();
    return -1;
  }
  return K;
}

/// The gate attribute of DIMENSION_DYNAMIC_MARKING (interned, leaked).
PyObject *dimMarkingGateName() {
  static PyObject *Name = PyUnicode_InternFromString("_has_dynamo_dim_marking");
  return Name;
}

/// The skipping check's largest estimated cost, as a fraction of F's, that
/// still plans, and the fixed cost of running one check function (entry,
/// local state, the ambient guards: ~150 ns, ~300 pointer compares). Both
/// calibrated on the corpus with `_core.skip_profile` (docs/performance.md,
/// "Subtree skipping"): the MLP (estimate 1.43x, measured 0.82x) declines,
/// param-heavy (1.69x, measured 1.04x) and every larger unit plan.
constexpr double MaxCostRatio = 2.0 / 3.0;
constexpr double EntryCost = 300;

/// What a validation step costs, in KindFacts.h's units (pointer compares):
/// the loads and compares validate() does for it.
double stepCost(SkipStep::Kind K) {
  switch (K) {
  case SkipStep::LoadLocal:
    return 5; // a dict probe
  case SkipStep::LoadItem:
    return 3;
  case SkipStep::DictOf:
    return 4;
  case SkipStep::KnownType:
    return 6;
  case SkipStep::TypeTag:
    return 3;
  case SkipStep::Tag:
  case SkipStep::Field:
    return 2;
  case SkipStep::TypeIs:
    return 1;
  }
  return 1;
}

bool isDictGuard(GuardKind K) {
  return K == GuardKind::DictLength || K == GuardKind::DictContains ||
         K == GuardKind::DictVersion;
}

/// Accessors R may contain: pure reads that run no Python code
/// (Accessors.def `Residual`).
bool residualAccessorOk(const GuardSet &S, const Value &V,
                        PyObject *const *Objs) {
  switch (residualUse(V.Kind)) {
  case ResidualUse::Residual:
    return true;
  case ResidualUse::ResidualIfStrKey:
    return PyUnicode_CheckExact(Objs[V.Key]);
  default:
    return false;
  }
}

/// Guards R may contain: native checks that run no Python code (Guards.def
/// `Residual`).
bool residualGuardOk(const Guard &G, PyObject *const *Objs) {
  switch (residualUse(G.Kind)) {
  case ResidualUse::Residual:
    return true;
  case ResidualUse::ResidualIfScalarConstant:
    // gj_rt_equals_match compares exact types first, so a live value of a
    // scalar constant's type compares in C. A tuple constant's items are
    // compared with the live tuple's items, whose __eq__ may be Python.
    return deeplyImmutable(Objs[G.Object]) && !PyTuple_Check(Objs[G.Object]);
  case ResidualUse::ResidualIfStrObject:
    return PyUnicode_CheckExact(Objs[G.Object]);
  case ResidualUse::ResidualIfNoFallback:
    return G.Object == InvalidId; // the Python fallback never runs
  default:
    return false;
  }
}

} // namespace

namespace guardjit {

/// Builds one SkipPlan (the four steps of the file comment).
class SkipPlanBuilder {
public:
  SkipPlanBuilder(const BoundGuardSet &B, PyObject *FrameLocals)
      : B(B), S(B.set()), Objs(B.objects()), FrameLocals(FrameLocals) {}

  std::unique_ptr<SkipPlan> run(std::string *WhyNot, bool CostModel);

private:
  enum class Role : uint8_t { Live, Anchor, Const, Stable };
  void classify();
  AttrOutcome trackRead(ValueId Owner, PyObject *Name, PyObject **Value);
  void layout(SkipPlan &P);
  bool implied(const Guard &G) const;
  std::shared_ptr<GuardSet> buildResidual(SkipPlan &P, std::string *WhyNot);
  bool fixed(ValueId V) const {
    return Roles[V] == Role::Stable || Roles[V] == Role::Const;
  }

  const BoundGuardSet &B;
  const GuardSet &S;
  PyObject *const *Objs;
  PyObject *FrameLocals;
  std::vector<Role> Roles;
  std::vector<PyObject *> Probe;     ///< the probed object of each value
  std::vector<PyObject *> ProbeDict; ///< Stable values' instance dicts
  std::vector<bool> TagTracked, AttrTracked;
  std::vector<bool> ModulesTracked; ///< a stable ModuleList item below
  /// Reads below decided by a registered function (plainRead): a KnownType
  /// step, and tag steps on the module's `_parameters`/`_buffers`/`_modules`
  /// or the config's attribute_map.
  std::vector<KnownAttrKind> KnownKind;
  std::vector<bool> ImpliedByRead; ///< per guard: NO_HASATTR proven missing
  std::vector<PyObject *> ImpliedName; ///< per guard: the name proven missing
  /// Values found by plainRead (not pureAttr), with their owner's kind.
  std::vector<bool> ViaPlainRead;
  std::vector<uint32_t> SlotOf;      ///< value -> slot (InvalidId: none)
  /// A step checks type(value) every call (DictOf, Tag, TypeTag), so a
  /// TYPE_MATCH on it that passed when recorded still does.
  std::vector<bool> TypeChecked;
};

/// plainRead of `Name` on the probed object of stable value `Owner`, whose
/// instance dict must be pinned by the caller (AttrTracked). Records what
/// else the answer relies on (KnownKind). *Value is set when Found.
AttrOutcome SkipPlanBuilder::trackRead(ValueId Owner, PyObject *Name,
                                       PyObject **Value) {
  PyObject *Obj = Probe[Owner];
  bool Ok;
  PyObject *D = instanceDict(Obj, /*Materialize=*/true, &Ok);
  if (!Ok)
    return AttrOutcome::Unknown;
  AttrOutcome O = plainRead(Obj, Name, D, Value);
  if (O != AttrOutcome::Unknown &&
      knownAttrKind(Obj) != KnownAttrKind::None)
    KnownKind[Owner] = knownAttrKind(Obj);
  return O;
}

void SkipPlanBuilder::classify() {
  size_t N = S.values().size();
  Roles.assign(N, Role::Live);
  Probe.assign(N, nullptr);
  ProbeDict.assign(N, nullptr);
  TagTracked.assign(N, false);
  AttrTracked.assign(N, false);
  ModulesTracked.assign(N, false);
  KnownKind.assign(N, KnownAttrKind::None);
  ViaPlainRead.assign(N, false);
  for (ValueId I = 1; I < N; ++I) {
    const Value &V = S.value(I);
    // An item of a frame-local tuple or dict (`L['args'][0]`, the `self` of
    // a function taking *args; `L['kwargs']['x']`) is an anchor of its own:
    // read again on every call (a LoadItem step), never assumed unchanged.
    if (V.Parent != InvalidId && V.Parent != GuardSet::root() &&
        Roles[V.Parent] == Role::Anchor &&
        S.value(V.Parent).Kind == AccessorKind::FrameLocal) {
      PyObject *P = Probe[V.Parent];
      PyObject *X = nullptr;
      int64_t Index = tupleIndex(V, Objs);
      if (Index >= 0 && PyTuple_CheckExact(P) && Index < PyTuple_GET_SIZE(P))
        X = PyTuple_GET_ITEM(P, Index);
      else if ((V.Kind == AccessorKind::DictGetItem ||
                V.Kind == AccessorKind::GetItem) &&
               PyDict_CheckExact(P) && cpy::strKeys(P) &&
               PyUnicode_CheckExact(Objs[V.Key]))
        X = PyDict_GetItem(P, Objs[V.Key]);
      if (X) {
        Roles[I] = Role::Anchor;
        Probe[I] = X;
        continue;
      }
    }
    if (V.Kind == AccessorKind::FrameLocal && V.Parent == GuardSet::root() &&
        PyUnicode_CheckExact(Objs[V.Key])) {
      if (PyObject *X = PyDict_GetItem(FrameLocals, Objs[V.Key])) {
        Roles[I] = Role::Anchor;
        Probe[I] = X;
      }
      continue;
    }
    if (V.Kind == AccessorKind::Globals) {
      Roles[I] = Role::Const;
      Probe[I] = Objs[V.Key];
      continue;
    }
    if (V.Kind == AccessorKind::Root || V.Parent == InvalidId ||
        Roles[V.Parent] == Role::Live)
      continue;
    PyObject *P = Probe[V.Parent];
    PyObject *X = nullptr;
    bool Ok = true;
    // A dict or tuple frame local (`L['kwargs']`, `L['args']`) is usually a
    // new object on every call: its items stay live reads (for a dict a tag
    // step would fail every call; a tuple has no step at all, SubtreeSkip.h).
    if (Roles[V.Parent] == Role::Anchor &&
        (PyDict_Check(P) || PyTuple_Check(P)))
      continue;
    switch (V.Kind) {
    case AccessorKind::DictGetItem:
      if (PyDict_Check(P) && (PyUnicode_CheckExact(Objs[V.Key]) ||
                              PyLong_CheckExact(Objs[V.Key])))
        X = PyDict_GetItem(P, Objs[V.Key]);
      if (X)
        TagTracked[V.Parent] = true;
      break;
    case AccessorKind::DictKey:
    case AccessorKind::DictValue: {
      PyObject *K, *Val;
      if (cpy::dictItemAt(P, V.Index, &K, &Val)) {
        X = V.Kind == AccessorKind::DictKey ? K : Val;
        TagTracked[V.Parent] = true;
      }
      break;
    }
    case AccessorKind::GenericDict:
      X = instanceDict(P, /*Materialize=*/true, &Ok);
      if (!Ok || (X && !PyDict_Check(X)))
        X = nullptr;
      break;
    case AccessorKind::GetAttr:
    case AccessorKind::GenericGetAttr: {
      if (Py_IS_TYPE(P, &PyCell_Type) || Py_IS_TYPE(P, &PyFunction_Type)) {
        // A data descriptor of a cell or function reading one field (a
        // Field step); a NULL field (an empty cell raises) is no value.
        if (int64_t Off = fieldAttrOffset(P, Objs[V.Key]); Off >= 0)
          X = cpy::fieldAt(P, Off);
        break;
      }
      PyObject *D = instanceDict(P, /*Materialize=*/true, &Ok);
      if (Ok)
        X = pureAttr(P, Objs[V.Key], D);
      if (!X && Ok) {
        if (trackRead(V.Parent, Objs[V.Key], &X) == AttrOutcome::Found)
          ViaPlainRead[I] = true;
        else
          X = nullptr;
      }
      // pureAttr assigns a version tag through _PyType_Lookup: test again.
      if (X && versionTagValid(Py_TYPE(P))) {
        AttrTracked[V.Parent] = true;
        ProbeDict[V.Parent] = D;
      } else {
        X = nullptr;
      }
      break;
    }
    case AccessorKind::GetItem: {
      if (PyTuple_CheckExact(P)) {
        // tuple.__getitem__ with an int: as TupleGetItem below.
        int64_t Index = tupleIndex(V, Objs);
        if (Roles[V.Parent] != Role::Anchor && Index >= 0 &&
            Index < PyTuple_GET_SIZE(P))
          X = PyTuple_GET_ITEM(P, Index);
        break;
      }
      if (PyDict_CheckExact(P)) {
        // dict_subscript of an exact dict: no __missing__, the same probe.
        if (PyUnicode_CheckExact(Objs[V.Key]) || PyLong_CheckExact(Objs[V.Key]))
          X = PyDict_GetItem(P, Objs[V.Key]);
        if (X)
          TagTracked[V.Parent] = true;
        break;
      }
      PyObject *D = nullptr;
      if (PyLong_CheckExact(Objs[V.Key]) && moduleListIndexing(Py_TYPE(P)) &&
          (D = instanceDict(P, /*Materialize=*/true, &Ok)) && Ok) {
        int Overflow = 0;
        long long K = PyLong_AsLongLongAndOverflow(Objs[V.Key], &Overflow);
        if (!Overflow && !PyErr_Occurred())
          X = moduleListItem(pureAttr(P, modulesName(), D), K);
        PyErr_Clear();
      }
      if (X && versionTagValid(Py_TYPE(P))) {
        AttrTracked[V.Parent] = true;
        ModulesTracked[V.Parent] = true;
        ProbeDict[V.Parent] = D;
      } else {
        X = nullptr;
      }
      break;
    }
    case AccessorKind::Type:
      X = reinterpret_cast<PyObject *>(Py_TYPE(P));
      break;
    case AccessorKind::TupleGetItem:
      // No step checks a tuple (immutable): its items are known only when
      // the tuple itself is, so never below an anchor (a new tuple each call).
      if (Roles[V.Parent] != Role::Anchor && PyTuple_CheckExact(P) &&
          V.Index >= 0 &&
          V.Index < PyTuple_GET_SIZE(P))
        X = PyTuple_GET_ITEM(P, V.Index);
      break;
    case AccessorKind::Code:
    case AccessorKind::FuncDefaults:
    case AccessorKind::FuncKwDefaults:
    case AccessorKind::Closure:
      if (Py_IS_TYPE(P, &PyFunction_Type))
        X = cpy::fieldAt(P, funcFieldOffset(V.Kind));
      break;
    case AccessorKind::TypeDict:
    case AccessorKind::TypeMro:
      if (PyType_Check(P))
        X = V.Kind == AccessorKind::TypeDict
                ? reinterpret_cast<PyTypeObject *>(P)->tp_dict
                : reinterpret_cast<PyTypeObject *>(P)->tp_mro;
      break;
    default:
      break; // every other read may run Python or sees mutable state
    }
    if (X) {
      Roles[I] = Role::Stable;
      Probe[I] = X;
    }
  }
  // NO_HASATTR on a stable value or anchor whose type, instance dict (and,
  // for the registered functions, the dicts they consult) steps pin:
  // implied. So is an unmarked tensor's DIMENSION_DYNAMIC_MARKING.
  ImpliedByRead.assign(S.guards().size(), false);
  ImpliedName.assign(S.guards().size(), nullptr);
  for (size_t GI = 0; GI < S.guards().size(); ++GI) {
    const Guard &G = S.guards()[GI];
    // DIMENSION_DYNAMIC_MARKING passes at once when the tensor has no
    // `_has_dynamo_dim_marking` (gj_rt_dimension_marking, rule 1): the same
    // proof as a NO_HASATTR on that name.
    PyObject *Name = G.Kind == GuardKind::NoHasAttr ? Objs[G.Object]
                     : G.Kind == GuardKind::DimensionMarking
                         ? dimMarkingGateName()
                         : nullptr;
    if (!Name || G.Operands.size() != 1 ||
        (Roles[G.Operands[0]] != Role::Stable &&
         Roles[G.Operands[0]] != Role::Anchor))
      continue;
    ValueId V = G.Operands[0];
    bool Ok;
    PyObject *D = instanceDict(Probe[V], /*Materialize=*/true, &Ok);
    PyObject *Found = nullptr;
    if (Ok && trackRead(V, Name, &Found) == AttrOutcome::Missing &&
        versionTagValid(Py_TYPE(Probe[V]))) {
      AttrTracked[V] = true;
      ProbeDict[V] = D;
      ImpliedByRead[GI] = true;
      ImpliedName[GI] = Name;
    }
  }
  // Dict guards on a stable dict become tag steps instead.
  for (const Guard &G : S.guards())
    if (isDictGuard(G.Kind) && G.Operands.size() == 1 &&
        fixed(G.Operands[0]) && PyDict_Check(Probe[G.Operands[0]]))
      TagTracked[G.Operands[0]] = true;
  // A tag step on a non-dict can never hold: leave such values untracked.
  for (ValueId I = 0; I < N; ++I)
    if (TagTracked[I] && !PyDict_Check(Probe[I]))
      TagTracked[I] = false;
}

void SkipPlanBuilder::layout(SkipPlan &P) {
  using Slot = SkipPlan::Slot;
  size_t N = S.values().size();
  SlotOf.assign(N, InvalidId);
  TypeChecked.assign(N, false);
  auto addSlot = [&](Slot X) {
    P.Slots.push_back(X);
    return static_cast<uint32_t>(P.Slots.size() - 1);
  };
  auto addStep = [&](SkipStep::Kind K, uint32_t Src, uint32_t Dst) {
    SkipStep St;
    St.K = K;
    St.Src = Src;
    St.Dst = Dst;
    P.Steps.push_back(St);
    return &P.Steps.back();
  };
  std::vector<uint32_t> HiddenOf(N, InvalidId), ModulesOf(N, InvalidId);
  std::vector<bool> AnchorUsed(N, false);
  for (ValueId I = 1; I < N; ++I) {
    if (Roles[I] == Role::Live)
      continue;
    const Value &V = S.value(I);
    Slot X;
    uint32_t Parent = Roles[I] == Role::Stable ||
                              (Roles[I] == Role::Anchor &&
                               V.Parent != GuardSet::root())
                          ? SlotOf[V.Parent]
                          : 0;
    X.Parent = Parent;
    switch (V.Kind) {
    case AccessorKind::FrameLocal:
      X.K = Slot::Anchor;
      X.Key = Objs[V.Key];
      break;
    case AccessorKind::Globals:
      X.K = Slot::Const;
      X.Key = Objs[V.Key];
      break;
    case AccessorKind::DictGetItem:
      X.K = Roles[I] == Role::Anchor ? Slot::AnchorItem : Slot::DictItem;
      X.Key = Objs[V.Key];
      break;
    case AccessorKind::DictKey:
    case AccessorKind::DictValue:
      X.K = V.Kind == AccessorKind::DictKey ? Slot::DictKey : Slot::DictValue;
      X.Index = V.Index;
      break;
    case AccessorKind::GenericDict:
      X.K = Slot::InstanceDict;
      break;
    case AccessorKind::GetAttr:
    case AccessorKind::GenericGetAttr:
      if (Py_IS_TYPE(Probe[V.Parent], &PyCell_Type) ||
          Py_IS_TYPE(Probe[V.Parent], &PyFunction_Type)) {
        X.K = Slot::FieldAttr;
        X.Offset = static_cast<uint32_t>(
            fieldAttrOffset(Probe[V.Parent], Objs[V.Key]));
        break;
      }
      X.K = Slot::Attr;
      X.Key = Objs[V.Key];
      X.Hidden = HiddenOf[V.Parent];
      X.ViaPlainRead = ViaPlainRead[I];
      X.PlainKind = KnownKind[V.Parent];
      break;
    case AccessorKind::GetItem: {
      if (PyTuple_CheckExact(Probe[V.Parent])) {
        X.K = Roles[I] == Role::Anchor ? Slot::AnchorItem : Slot::TupleItem;
        X.Index = tupleIndex(V, Objs);
        break;
      }
      if (PyDict_CheckExact(Probe[V.Parent])) {
        X.K = Roles[I] == Role::Anchor ? Slot::AnchorItem : Slot::DictItem;
        X.Key = Objs[V.Key];
        break;
      }
      X.K = Slot::ModuleListItem;
      X.Hidden = ModulesOf[V.Parent];
      int Overflow = 0;
      X.Index = PyLong_AsLongLongAndOverflow(Objs[V.Key], &Overflow);
      break;
    }
    case AccessorKind::Type:
      X.K = Slot::TypeOf;
      break;
    case AccessorKind::TupleGetItem:
      X.K = Roles[I] == Role::Anchor ? Slot::AnchorItem : Slot::TupleItem;
      X.Index = tupleIndex(V, Objs);
      break;
    case AccessorKind::Code:
    case AccessorKind::FuncDefaults:
    case AccessorKind::FuncKwDefaults:
    case AccessorKind::Closure:
      X.K = Slot::FuncField;
      X.Offset = funcFieldOffset(V.Kind);
      break;
    case AccessorKind::TypeDict:
      X.K = Slot::TypeField;
      X.Offset = offsetof(PyTypeObject, tp_dict);
      break;
    case AccessorKind::TypeMro:
      X.K = Slot::TypeField;
      X.Offset = offsetof(PyTypeObject, tp_mro);
      break;
    default:
      assert(false && "classify() marks no other accessor stable");
      break;
    }
    uint32_t Me = addSlot(X);
    SlotOf[I] = Me;
    if (Roles[I] == Role::Stable) {
      ++P.NumStable;
      ValueId A = V.Parent;
      while (Roles[A] == Role::Stable)
        A = S.value(A).Parent;
      AnchorUsed[A] = true;
    }
    // This slot's own step, checked before anything below it.
    bool TagDone = false;
    switch (X.K) {
    case Slot::Anchor:
      addStep(SkipStep::LoadLocal, 0, Me)->Key = X.Key;
      break;
    case Slot::AnchorItem: {
      SkipStep *L = addStep(SkipStep::LoadItem, Parent, Me);
      L->Key = X.Key;
      L->Offset = static_cast<uint32_t>(X.Index);
      break;
    }
    case Slot::InstanceDict:
      // One step: the owner's type, its __dict__ pointer and (when items
      // below are stable) that dict's tag.
      addStep(SkipStep::DictOf, Parent, Me)->WithTag = TagTracked[I];
      TypeChecked[V.Parent] = true;
      TagDone = true;
      break;
    case Slot::TypeOf:
      addStep(SkipStep::TypeIs, Parent, Me);
      break;
    case Slot::FuncField:
    case Slot::TypeField:
    case Slot::FieldAttr:
      addStep(SkipStep::Field, Parent, Me)->Offset = X.Offset;
      break;
    default:
      break; // covered by the parent's tag or attribute steps
    }
    // What this slot's stable children rely on.
    if (TagTracked[I] && !TagDone) {
      addStep(SkipStep::Tag, Me, Me);
      TypeChecked[I] = true;
    }
    if (AttrTracked[I]) {
      addStep(SkipStep::TypeTag, Me, Me);
      TypeChecked[I] = true;
      Slot H;
      H.K = Slot::InstanceDict;
      H.Parent = Me;
      H.Nullable = true;
      uint32_t HS = addSlot(H);
      HiddenOf[I] = HS;
      addStep(SkipStep::DictOf, Me, HS)->WithTag = true;
      auto addTaggedAttr = [&](PyObject *Name) {
        Slot M;
        M.K = Slot::Attr;
        M.Parent = Me;
        M.Hidden = HS;
        M.Key = Name;
        uint32_t MS = addSlot(M);
        addStep(SkipStep::Tag, MS, MS);
        return MS;
      };
      if (ModulesTracked[I])
        ModulesOf[I] = addTaggedAttr(modulesName());
      // What a registered function's reads rely on (plainRead).
      if (KnownKind[I] != KnownAttrKind::None) {
        addStep(SkipStep::KnownType, Me, Me)->Known = KnownKind[I];
        if (KnownKind[I] == KnownAttrKind::Module) {
          for (PyObject *Name : moduleDictNames())
            if (Name != modulesName() || !ModulesTracked[I])
              addTaggedAttr(Name);
        } else {
          Slot M;
          M.K = Slot::ConfigMap;
          M.Parent = Me;
          M.Hidden = HS;
          uint32_t MS = addSlot(M);
          addStep(SkipStep::Tag, MS, MS);
        }
      }
    }
  }
  for (size_t GI = 0; GI < S.guards().size(); ++GI)
    if (ImpliedByRead[GI]) {
      ValueId V = S.guards()[GI].Operands[0];
      P.MissingAttrs.push_back(
          {SlotOf[V], HiddenOf[V], ImpliedName[GI], KnownKind[V]});
    }
  for (ValueId I = 0; I < N; ++I)
    if (AnchorUsed[I])
      ++P.NumSubtrees;
}

bool SkipPlanBuilder::implied(const Guard &G) const {
  if (G.Operands.empty())
    return false;
  if (ImpliedByRead[&G - S.guards().data()])
    return true;
  if (G.Kind == GuardKind::TypeMatch) {
    // Anchors included: the step compares the live object's type. An object
    // of a static type (not a module type) cannot have __class__ reassigned.
    ValueId V = G.Operands[0];
    if (Roles[V] == Role::Live)
      return false;
    auto *T = reinterpret_cast<PyTypeObject *>(Objs[G.Object]);
    return TypeChecked[V] ||
           (fixed(V) && !(T->tp_flags & Py_TPFLAGS_HEAPTYPE) &&
            !PyType_IsSubtype(T, &PyModule_Type));
  }
  for (ValueId Op : G.Operands)
    if (!fixed(Op))
      return false;
  ValueId V = G.Operands.front();
  switch (G.Kind) {
  case GuardKind::IdMatch:
  case GuardKind::NoneMatch:
  case GuardKind::TrueMatch:
  case GuardKind::FalseMatch:
  case GuardKind::NotNone:
  case GuardKind::ObjectAliasing:   // both operands are the recorded objects
  case GuardKind::NoTensorAliasing: // distinct recorded objects stay distinct
    return true;
  case GuardKind::EqualsMatch:
    // It passed on the recorded object, which record() requires to be
    // deeply immutable as well (ImmutableSlots).
    return deeplyImmutable(Objs[G.Object]);
  case GuardKind::DictLength:
  case GuardKind::DictContains:
  case GuardKind::DictVersion:
    return TagTracked[V];
  case GuardKind::LengthCheck:
  case GuardKind::LengthCheckSetSize:
    return TagTracked[V] || PyTuple_CheckExact(Probe[V]);
  default:
    return false;
  }
}

std::shared_ptr<GuardSet>
SkipPlanBuilder::buildResidual(SkipPlan &P, std::string *WhyNot) {
  auto newSet = [&](const char *Suffix) {
    auto X = std::make_shared<GuardSet>(S.name() + Suffix);
    for (const ObjectEntry &E : S.objects())
      X->addObject(E);
    for (const TensorSpec &T : S.tensorSpecs())
      X->addTensorSpec(T);
    for (const GuardOrigin &O : S.origins())
      X->addOrigin(O);
    return X;
  };
  auto R = newSet(".residual");
  size_t N = S.values().size();
  // A live read that may run Python taints every value read through it:
  // those reads and the guards on them run before validation, in the
  // prelude, re-read from the root exactly as in F (SubtreeSkip.h).
  std::vector<bool> Tainted(N, false);
  for (ValueId I = 1; I < N; ++I) {
    const Value &V = S.value(I);
    if (Roles[I] != Role::Live)
      continue;
    Tainted[I] = !residualAccessorOk(S, V, Objs) ||
                 (V.Parent != InvalidId && Tainted[V.Parent]);
  }
  std::vector<ValueId> Map(N, InvalidId);
  Map[0] = GuardSet::root();
  // `map` creates values on demand: a slot read for anchors and stable
  // values, the original accessor (parent mapped) for live values.
  auto map = [&](auto &&Self, ValueId I) -> ValueId {
    if (Map[I] != InvalidId)
      return Map[I];
    const Value &V = S.value(I);
    Value NV = V;
    if (Roles[I] != Role::Live) {
      NV.Kind = AccessorKind::Recorded;
      NV.Parent = GuardSet::root();
      NV.Index = SlotOf[I];
      NV.Key = InvalidId;
      NV.Name.clear();
    } else {
      NV.Parent = Self(Self, V.Parent);
    }
    return Map[I] = R->addValue(NV);
  };
  std::shared_ptr<GuardSet> Pre;
  std::vector<ValueId> PreMap(N, InvalidId);
  PreMap[0] = GuardSet::root();
  // The prelude reads every value through F's own accessors.
  auto preMap = [&](auto &&Self, ValueId I) -> ValueId {
    if (PreMap[I] != InvalidId)
      return PreMap[I];
    Value NV = S.value(I);
    NV.Parent = Self(Self, NV.Parent);
    return PreMap[I] = Pre->addValue(NV);
  };
  auto needPrelude = [&] {
    if (!Pre)
      Pre = newSet(".prelude");
  };
  // Every live value is read, as in F (a read with no guard is a check).
  for (ValueId I = 1; I < N; ++I)
    if (Roles[I] == Role::Live) {
      if (Tainted[I]) {
        needPrelude();
        preMap(preMap, I);
      } else {
        map(map, I);
      }
    }
  std::vector<bool> BuiltinTyped(N, false);
  for (const Guard &G : S.guards()) {
    if (implied(G)) {
      ++P.NumImplied;
      if (G.Kind == GuardKind::EqualsMatch)
        P.ImmutableSlots.push_back(SlotOf[G.Operands[0]]);
      continue;
    }
    // LENGTH_CHECK runs __len__: Python-free on a recorded object of a
    // built-in type (whose __class__ cannot be reassigned), or after a
    // TYPE_MATCH to a built-in type on the same value (guards run in order
    // and the first failure ends the check).
    bool BuiltinLength =
        (G.Kind == GuardKind::LengthCheck ||
         G.Kind == GuardKind::LengthCheckSetSize) &&
        ((fixed(G.Operands[0]) &&
          !(Py_TYPE(Probe[G.Operands[0]])->tp_flags & Py_TPFLAGS_HEAPTYPE)) ||
         BuiltinTyped[G.Operands[0]]);
    if (G.Kind == GuardKind::TypeMatch &&
        !(reinterpret_cast<PyTypeObject *>(Objs[G.Object])->tp_flags &
          Py_TPFLAGS_HEAPTYPE))
      BuiltinTyped[G.Operands[0]] = true;
    bool Python = !BuiltinLength && !residualGuardOk(G, Objs);
    for (ValueId Op : G.Operands)
      Python = Python || Tainted[Op];
    Guard NG = G;
    if (Python) {
      needPrelude();
      for (ValueId &Op : NG.Operands)
        Op = preMap(preMap, Op);
      Pre->addGuard(std::move(NG));
      continue;
    }
    for (ValueId &Op : NG.Operands)
      Op = map(map, Op);
    R->addGuard(std::move(NG));
  }
  for (ValueId I = 0; I < R->values().size(); ++I)
    if (!residualAccessorOk(*R, R->value(I), Objs)) {
      // Cannot happen (tainted values went to the prelude); kept as the
      // last word on what R may contain.
      *WhyNot = "the residual check would run Python (" +
                describeValue(*R, I) + ")";
      return nullptr;
    }
  P.Prelude = std::move(Pre);
  return R;
}

std::unique_ptr<SkipPlan> SkipPlanBuilder::run(std::string *WhyNot,
                                               bool CostModel) {
  if (!PyDict_CheckExact(FrameLocals)) {
    *WhyNot = "the frame locals are not a dict";
    return nullptr;
  }
  classify();
  std::unique_ptr<SkipPlan> P(new SkipPlan());
  layout(*P);
  if (P->NumStable == 0) {
    *WhyNot = "no value is a pure read of an unchanged object";
    return nullptr;
  }
  P->Residual = buildResidual(*P, WhyNot);
  if (!P->Residual)
    return nullptr;
  if (P->NumImplied == 0) {
    *WhyNot = "no guard is implied by unchanged dicts and types";
    return nullptr;
  }
  // The cost model (pointer-compare units of KindFacts.h): F's estimated
  // cost against the skipping check's (its steps, R and the prelude). A
  // plan whose check is not clearly cheaper declines: validation costs ~3 ns
  // a step, so a small unit whose guards are cheap can lose (the MLP
  // measured 0.85x of its full check: docs/performance.md).
  auto setCost = [](const GuardSet &X) {
    double C = 0;
    for (const Guard &G : X.guards())
      C += checkCost(G.Kind, G.Operands.size());
    for (const Value &V : X.values())
      C += readCost(V.Kind);
    return C;
  };
  double Full = EntryCost + setCost(S);
  double Skip = EntryCost + setCost(*P->Residual);
  for (const SkipStep &St : P->Steps)
    Skip += stepCost(St.K);
  if (P->Prelude)
    Skip += EntryCost + setCost(*P->Prelude);
  P->FullCost = Full;
  P->SkipCost = Skip;
  if (CostModel && Skip > MaxCostRatio * Full) {
    *WhyNot = "the plan does not pay (an estimated " +
              std::to_string(static_cast<long>(Skip)) + " against " +
              std::to_string(static_cast<long>(Full)) +
              " pointer compares per call for the full check)";
    return nullptr;
  }
  (void)B;
  return P;
}

} // namespace guardjit

std::unique_ptr<SkipPlan> SkipPlan::build(const BoundGuardSet &Full,
                                          PyObject *FrameLocals,
                                          std::string *WhyNot,
                                          bool CostModel) {
  return SkipPlanBuilder(Full, FrameLocals).run(WhyNot, CostModel);
}
