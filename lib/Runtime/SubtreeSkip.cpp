//===- SubtreeSkip.cpp - Sound skipping of unchanged subtrees ------------===//
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
//     with stable operands read from their slots;
//  4. decline when R could run Python code (SubtreeSkip.h: a skipped check
//     must be atomic) or nothing is skipped.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/SubtreeSkip.h"

#include <cstddef>
#include <cstring>
#include <unordered_map>

using namespace guardjit;

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030C0000
#error "SubtreeSkip reads CPython 3.11's ma_version_tag (3.12: dict watchers)"
#endif

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
  };
  Kind K = Anchor;
  uint32_t Parent = 0; ///< slot index
  uint32_t Hidden = 0; ///< Attr: the slot of Parent's instance dict
  bool Nullable = false; ///< a hidden instance dict may be absent
  PyObject *Key = nullptr;
  int64_t Index = -1;
  uint32_t Offset = 0;
};

namespace {

/// The instance dict of `Obj`: what PyObject_GenericGetDict returns. With
/// `Materialize` a managed dict still in the 3.11 values layout is turned
/// into a dict first, as `obj.__dict__` does (an allocation, no Python code);
/// without it (validation) such an object reads as "no dict", which never
/// matches a recorded dict. Sets *Ok false for layouts this does not read
/// (a negative tp_dictoffset).
PyObject *instanceDict(PyObject *Obj, bool Materialize, bool *Ok) {
  PyTypeObject *T = Py_TYPE(Obj);
  *Ok = true;
  if (T->tp_flags & Py_TPFLAGS_MANAGED_DICT) {
    auto **Base = reinterpret_cast<PyObject **>(Obj);
    if (Base[-4] == nullptr) // _PyObject_ValuesPointer: already a dict
      return Base[-3];       // _PyObject_ManagedDictPointer
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
  return *reinterpret_cast<PyObject **>(reinterpret_cast<char *>(Obj) +
                                        T->tp_dictoffset);
}

bool dictItemAt(PyObject *Dict, Py_ssize_t Index, bool WantKey,
                PyObject **Out) {
  if (!PyDict_Check(Dict) || Index < 0 || Index >= PyDict_GET_SIZE(Dict))
    return false;
  Py_ssize_t Pos = 0, Ordinal = 0;
  PyObject *K, *V;
  while (PyDict_Next(Dict, &Pos, &K, &V))
    if (Ordinal++ == Index) {
      *Out = WantKey ? K : V;
      return true;
    }
  return false;
}

/// tp_getattro of a class defining __getattr__ (slot_tp_getattr_hook, which
/// CPython does not export), found once from a probe class.
getattrofunc getattrHook() {
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
bool genericGetattr(PyTypeObject *T) {
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
PyObject *pureAttr(PyObject *Obj, PyObject *Name, PyObject *Dict) {
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

bool versionTagValid(PyTypeObject *T) {
  return (T->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && T->tp_version_tag;
}

/// torch.nn.ModuleList's __getitem__, _get_abs_string_index and __len__, as
/// registered (strong references) by registerModuleListGetItem.
PyObject *ModuleListFns[3] = {nullptr, nullptr, nullptr};

/// Whether `T` indexes with torch's reviewed ModuleList.__getitem__: for an
/// int `idx`, `self._modules[str(idx mod len(self._modules))]`, no Python
/// needed (valid while T's version tag holds).
bool moduleListIndexing(PyTypeObject *T) {
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

PyObject *modulesName() {
  static PyObject *Name = PyUnicode_InternFromString("_modules");
  return Name;
}

/// `Modules[str(Index)]` after ModuleList._get_abs_string_index's range
/// check and wrap, or nullptr (IndexError, missing key).
PyObject *moduleListItem(PyObject *Modules, int64_t Index) {
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
bool deeplyImmutable(PyObject *C, int Depth = 0) {
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

bool isDictGuard(GuardKind K) {
  return K == GuardKind::DictLength || K == GuardKind::DictContains ||
         K == GuardKind::DictVersion;
}

/// Accessors R may contain: pure reads that run no Python code
/// (Accessors.def `Residual`).
bool residualAccessorOk(const GuardSet &S, const Value &V,
                        PyObject *const *Objs) {
  (void)S;
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

  std::unique_ptr<SkipPlan> run(std::string *WhyNot);

private:
  enum class Role : uint8_t { Live, Anchor, Const, Stable };
  void classify();
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
  std::vector<uint32_t> SlotOf;      ///< value -> slot (InvalidId: none)
  /// A step checks type(value) every call (DictOf, Tag, TypeTag), so a
  /// TYPE_MATCH on it that passed when recorded still does.
  std::vector<bool> TypeChecked;
};

void SkipPlanBuilder::classify() {
  size_t N = S.values().size();
  Roles.assign(N, Role::Live);
  Probe.assign(N, nullptr);
  ProbeDict.assign(N, nullptr);
  TagTracked.assign(N, false);
  AttrTracked.assign(N, false);
  ModulesTracked.assign(N, false);
  for (ValueId I = 1; I < N; ++I) {
    const Value &V = S.value(I);
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
    case AccessorKind::DictValue:
      if (dictItemAt(P, V.Index, V.Kind == AccessorKind::DictKey, &X))
        TagTracked[V.Parent] = true;
      break;
    case AccessorKind::GenericDict:
      X = instanceDict(P, /*Materialize=*/true, &Ok);
      if (!Ok || (X && !PyDict_Check(X)))
        X = nullptr;
      break;
    case AccessorKind::GetAttr:
    case AccessorKind::GenericGetAttr: {
      PyObject *D = instanceDict(P, /*Materialize=*/true, &Ok);
      if (Ok)
        X = pureAttr(P, Objs[V.Key], D);
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
      if (PyFunction_Check(P) && Py_IS_TYPE(P, &PyFunction_Type))
        X = V.Kind == AccessorKind::Code ? PyFunction_GET_CODE(P)
            : V.Kind == AccessorKind::FuncDefaults
                ? PyFunction_GET_DEFAULTS(P)
                : PyFunction_GET_KW_DEFAULTS(P);
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
    uint32_t Parent = Roles[I] == Role::Stable ? SlotOf[V.Parent] : 0;
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
      X.K = Slot::DictItem;
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
      X.K = Slot::Attr;
      X.Key = Objs[V.Key];
      X.Hidden = HiddenOf[V.Parent];
      break;
    case AccessorKind::GetItem: {
      if (PyDict_CheckExact(Probe[V.Parent])) {
        X.K = Slot::DictItem;
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
      X.K = Slot::TupleItem;
      X.Index = V.Index;
      break;
    case AccessorKind::Code:
      X.K = Slot::FuncField;
      X.Offset = offsetof(PyFunctionObject, func_code);
      break;
    case AccessorKind::FuncDefaults:
      X.K = Slot::FuncField;
      X.Offset = offsetof(PyFunctionObject, func_defaults);
      break;
    case AccessorKind::FuncKwDefaults:
      X.K = Slot::FuncField;
      X.Offset = offsetof(PyFunctionObject, func_kwdefaults);
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
      if (ModulesTracked[I]) {
        Slot M;
        M.K = Slot::Attr;
        M.Parent = Me;
        M.Hidden = HS;
        M.Key = modulesName();
        uint32_t MS = addSlot(M);
        ModulesOf[I] = MS;
        addStep(SkipStep::Tag, MS, MS);
      }
    }
  }
  for (ValueId I = 0; I < N; ++I)
    if (AnchorUsed[I])
      ++P.NumSubtrees;
}

bool SkipPlanBuilder::implied(const Guard &G) const {
  if (G.Operands.empty())
    return false;
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
  auto R = std::make_shared<GuardSet>(S.name() + ".residual");
  for (const ObjectEntry &E : S.objects())
    R->addObject(E);
  for (const TensorSpec &T : S.tensorSpecs())
    R->addTensorSpec(T);
  for (const GuardOrigin &O : S.origins())
    R->addOrigin(O);
  size_t N = S.values().size();
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
  // Every live value is read, as in F (a read with no guard is a check).
  for (ValueId I = 1; I < N; ++I)
    if (Roles[I] == Role::Live)
      map(map, I);
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
    if (!BuiltinLength && !residualGuardOk(G, Objs)) {
      *WhyNot = "the residual check would run Python (" +
                describeGuard(S, &G - S.guards().data()) + ")";
      return nullptr;
    }
    Guard NG = G;
    for (ValueId &Op : NG.Operands)
      Op = map(map, Op);
    R->addGuard(std::move(NG));
  }
  for (ValueId I = 0; I < R->values().size(); ++I)
    if (!residualAccessorOk(*R, R->value(I), Objs)) {
      *WhyNot = "the residual check would run Python (" +
                describeValue(*R, I) + ")";
      return nullptr;
    }
  return R;
}

std::unique_ptr<SkipPlan> SkipPlanBuilder::run(std::string *WhyNot) {
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
  (void)B;
  return P;
}

} // namespace guardjit

std::unique_ptr<SkipPlan> SkipPlan::build(const BoundGuardSet &Full,
                                          PyObject *FrameLocals,
                                          std::string *WhyNot) {
  return SkipPlanBuilder(Full, FrameLocals).run(WhyNot);
}

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
  case Slot::DictValue:
    dictItemAt(P, X.Index, X.K == Slot::DictKey, &R);
    break;
  case Slot::InstanceDict:
    R = instanceDict(P, /*Materialize=*/true, &Ok);
    if (!Ok || (R && !PyDict_Check(R)))
      return false;
    Table[I] = R;
    return R || X.Nullable;
  case Slot::Attr:
    // _PyType_Lookup assigns the version tag the TypeTag step records.
    R = pureAttr(P, X.Key, Table[X.Hidden]);
    if (!versionTagValid(Py_TYPE(P)))
      R = nullptr;
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
      R = *reinterpret_cast<PyObject **>(reinterpret_cast<char *>(P) +
                                         X.Offset);
    break;
  case Slot::TypeField:
    if (PyType_Check(P))
      R = *reinterpret_cast<PyObject **>(reinterpret_cast<char *>(P) +
                                         X.Offset);
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
  for (SkipStep &St : Steps) {
    PyObject *O = Table[St.Src];
    switch (St.K) {
    case SkipStep::LoadLocal:
      break;
    case SkipStep::DictOf:
      St.Expect = Table[St.Dst];
      St.Type = Py_TYPE(O);
      if (St.WithTag && St.Expect) {
        PyObject *D = St.Expect;
        if (!PyDict_Check(D) ||
            reinterpret_cast<PyDictObject *>(D)->ma_version_tag == 0) {
          ++Stats.RecordFailures;
          return false;
        }
        St.DictType = Py_TYPE(D);
        St.Version = reinterpret_cast<PyDictObject *>(D)->ma_version_tag;
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
          reinterpret_cast<PyDictObject *>(O)->ma_version_tag == 0) {
        ++Stats.RecordFailures;
        return false;
      }
      St.Type = Py_TYPE(O);
      St.Version = reinterpret_cast<PyDictObject *>(O)->ma_version_tag;
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
           reinterpret_cast<PyDictObject *>(D)->ma_version_tag != St.Version))
        return false;
      break;
    }
    case SkipStep::Tag: {
      PyObject *O = T[St.Src];
      if (O && (Py_TYPE(O) != St.Type ||
                reinterpret_cast<PyDictObject *>(O)->ma_version_tag !=
                    St.Version))
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
          *reinterpret_cast<PyObject **>(reinterpret_cast<char *>(T[St.Src]) +
                                         St.Offset) != St.Expect)
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
