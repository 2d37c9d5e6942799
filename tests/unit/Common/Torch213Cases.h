//===- Torch213Cases.h - Pass/fail cases of the torch 2.13 kinds -*- C++ -*-===//
//
// One table of cases for the guard and accessor kinds added for torch 2.13
// (TUPLE_ITERATOR_LEN, RANGE_ITERATOR_MATCH, MAPPING_KEYS_MATCH,
// SET_CONTAINS, DISPATCH_KEY_SET_MATCH, DUAL_LEVEL_MATCH, OBJECT_ALIASING,
// STORAGE_OVERLAPPING; grad, set_get_item, tuple_iterator_get_item), shared
// by the interpreter tests (tests/unit/Runtime) and the JIT tests
// (tests/unit/JIT), so both check the same expected answers.
//
// Embeds CPython (the including test binary initializes it). The torch hooks
// are faked: `FakeTensor(grad)` objects stand for tensors, a tensor's storage
// is an interval `(start, stop)`, and check_overlapping is computed over
// intervals; the real ATen hooks are tested from Python
// (tests/python/test_torch213_kinds.py).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TESTS_UNIT_COMMON_TORCH213CASES_H
#define GUARDJIT_TESTS_UNIT_COMMON_TORCH213CASES_H

#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Python.h"
#include "guardjit/Runtime/TorchHooks.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace guardjit::torch213 {

inline const char *const Prelude = R"py(
import types

class FakeTensor:
    def __init__(self, grad=None, storage=(0, 0)):
        self.fake_grad = grad
        self.storage = storage

class FakeDKS:
    def __init__(self, raw):
        self.raw = raw
    def raw_repr(self):
        return self.raw

class SubDKS(FakeDKS):
    pass

class BadDKS(FakeDKS):
    def raw_repr(self):
        raise RuntimeError('no repr')

class BadEq:
    def __eq__(self, other):
        raise ValueError('eq')
    def __hash__(self):
        return 1

class KeysRaise:
    def keys(self):
        raise RuntimeError('no keys')

class FSet(frozenset):
    pass

class FakeScript:
    def __init__(self, real):
        self.real_obj = real

class FakeScriptSub(FakeScript):
    pass

class NoReal(FakeScript):
    def __init__(self):
        pass

class Real:
    pass

class RealSub(Real):
    pass

class LiarFake:
    __class__ = property(lambda self: FakeScript)
    real_obj = Real()

fwd = types.SimpleNamespace(_current_level=0)
tuple_iterator = type(iter(()))
range_iterator = type(iter(range(1)))

def advanced(it, n):
    for _ in range(n):
        next(it)
    return it

obj = object()

# The saved-tensors hooks stack top the fake hook reads (None: no hooks).
class GM:
    pass

class GMSub(GM):
    pass

class RaisingClass:
    @property
    def __class__(self):
        raise RuntimeError('no class')

saved_hooks = None
hp, hu = GM(), GM()
)py";

inline PyObject *prelude() {
  static PyObject *NS = [] {
    PyObject *D = PyDict_New();
    PyDict_SetItemString(D, "__builtins__", PyEval_GetBuiltins());
    PyObject *R = PyRun_String(Prelude, Py_file_input, D, D);
    if (!R)
      PyErr_Print();
    Py_XDECREF(R);
    return D;
  }();
  return NS;
}

/// Evaluates `Expr` in the prelude's namespace: a new reference.
inline PyObject *evalNew(const std::string &Expr) {
  PyObject *R =
      PyRun_String(Expr.c_str(), Py_eval_input, prelude(), prelude());
  if (!R) {
    PyErr_Print();
    ADD_FAILURE() << "eval failed: " << Expr;
  }
  return R;
}

inline void execPrelude(const std::string &Src) {
  PyObject *R = PyRun_String(Src.c_str(), Py_file_input, prelude(), prelude());
  if (!R) {
    PyErr_Print();
    ADD_FAILURE() << "exec failed: " << Src;
  }
  Py_XDECREF(R);
}

//===----------------------------------------------------------------------===//
// Fake torch hooks
//===----------------------------------------------------------------------===//

inline LocalState &fakeState() {
  static LocalState S;
  return S;
}

inline PyObject *fakeType(const char *Name) {
  return PyDict_GetItemString(prelude(), Name);
}

inline void fakeReadLocalState(LocalState *S) { *S = fakeState(); }
inline int fakeTensorMatch(PyObject *, const void *, const LocalState *) {
  return 0;
}
inline int fakeGlobalState(const void *) { return 1; }
inline int fakeModeStack(const void *) { return 1; }
inline void *fakePrepare(const GuardSet &, const Guard &, PyObject *const *,
                         std::string *Error) {
  *Error = "no torch guards in these tests";
  return nullptr;
}
inline void fakeRelease(const Guard &, void *) {}

/// A FakeTensor's `fake_grad` (new reference); NULL for anything else.
inline PyObject *fakeTensorGrad(PyObject *V) {
  if (!PyObject_TypeCheck(
          V, reinterpret_cast<PyTypeObject *>(fakeType("FakeTensor"))))
    return nullptr;
  return PyObject_GetAttrString(V, "fake_grad");
}

/// check_overlapping over FakeTensor storage intervals [start, stop).
inline int fakeStorageOverlapping(PyObject *const *Ts, size_t N, size_t K) {
  std::vector<std::pair<long, long>> Iv;
  for (size_t I = 0; I < N; ++I) {
    if (!PyObject_TypeCheck(
            Ts[I], reinterpret_cast<PyTypeObject *>(fakeType("FakeTensor"))))
      return 0;
    PyObject *St = PyObject_GetAttrString(Ts[I], "storage");
    long A = PyLong_AsLong(PyTuple_GetItem(St, 0));
    long B = PyLong_AsLong(PyTuple_GetItem(St, 1));
    Py_DECREF(St);
    Iv.emplace_back(A, B);
  }
  std::vector<char> Aliased(N, 0);
  for (size_t I = 0; I < N; ++I)
    for (size_t J = 0; J < I; ++J)
      if (Iv[I].first < Iv[J].second && Iv[J].first < Iv[I].second)
        Aliased[I] = Aliased[J] = 1;
  for (size_t I = 0; I < N; ++I)
    if (Aliased[I] != (I < K ? 1 : 0))
      return 0;
  return 1;
}

/// AUTOGRAD_SAVED_TENSORS_HOOKS over the prelude's `saved_hooks` (None or
/// a (pack, unpack) pair), with TorchRuntime's rule: ids iff both hooks are
/// instances of `GraphModule` (pack tested first), a raising isinstance fails.
inline int fakeSavedTensorsHooks(PyObject *GraphModule, int HasIds,
                                 int64_t Pack, int64_t Unpack) {
  PyObject *Hooks = PyDict_GetItemString(prelude(), "saved_hooks");
  if (!Hooks || Hooks == Py_None)
    return !HasIds;
  PyObject *P = PyTuple_GetItem(Hooks, 0), *U = PyTuple_GetItem(Hooks, 1);
  int In = PyObject_IsInstance(P, GraphModule);
  if (In > 0)
    In = PyObject_IsInstance(U, GraphModule);
  if (In < 0) {
    PyErr_Clear();
    return 0;
  }
  if (!In)
    return !HasIds;
  return HasIds && reinterpret_cast<intptr_t>(P) == Pack &&
         reinterpret_cast<intptr_t>(U) == Unpack;
}

inline const TorchHooks &fakeHooks() {
  static const TorchHooks H = {
      fakeReadLocalState, fakeTensorMatch,        fakeGlobalState,
      fakeModeStack,      fakePrepare,            fakeRelease,
      fakeTensorGrad,     fakeStorageOverlapping, nullptr,
      fakeSavedTensorsHooks};
  return H;
}

//===----------------------------------------------------------------------===//
// Cases
//===----------------------------------------------------------------------===//

/// Builds guard sets over live objects (kept alive by the builder).
class Builder {
public:
  Builder() : S(std::make_shared<GuardSet>("torch213")) {}
  ~Builder() {
    for (PyObject *O : Keep)
      Py_DECREF(O);
  }
  ObjectId object(const std::string &Expr, ObjectKind K = ObjectKind::Object,
                  bool Strong = true) {
    PyObject *O = evalNew(Expr);
    Keep.push_back(O);
    ObjectEntry E;
    E.Kind = K;
    E.Strong = Strong;
    E.Repr = Expr;
    E.Address = reinterpret_cast<uintptr_t>(O);
    return S->addObject(E);
  }
  ValueId local(const char *Name) {
    Value V;
    V.Kind = AccessorKind::FrameLocal;
    V.Parent = GuardSet::root();
    V.Name = Name;
    V.Key = object("'" + std::string(Name) + "'", ObjectKind::Key);
    V.Source = std::string("L['") + Name + "']";
    return S->getOrAddValue(V);
  }
  ValueId child(AccessorKind K, ValueId Parent, int64_t Index = -1) {
    Value V;
    V.Kind = K;
    V.Parent = Parent;
    V.Index = Index;
    V.Source = S->value(Parent).Source + "." + std::string(spelling(K));
    return S->addValue(V);
  }
  Guard &guard(GuardKind K, std::vector<ValueId> Ops,
               ObjectId Obj = InvalidId, int64_t Int = 0) {
    Guard G;
    G.Kind = K;
    G.Operands = std::move(Ops);
    G.Object = Obj;
    G.Int = Int;
    S->addGuard(G);
    return S->guards().back();
  }
  std::shared_ptr<GuardSet> S;

private:
  std::vector<PyObject *> Keep;
};

/// One scenario: a guard set, then frame locals with the expected answer.
/// `Before` runs (as Python) before the locals are evaluated.
struct Probe {
  std::string Locals;
  bool Expected;
  std::string Before = "";
};
struct Case {
  std::string Name;
  std::function<void(Builder &)> Build;
  std::vector<Probe> Probes;
};

inline std::vector<Case> cases() {
  std::vector<Case> C;

  C.push_back({"TupleIteratorLen",
               [](Builder &B) {
                 B.guard(GuardKind::TupleIteratorLen, {B.local("it")},
                         B.object("tuple_iterator", ObjectKind::Type), 2);
               },
               {{"{'it': iter((1, 2))}", true},
                {"{'it': advanced(iter((1, 2, 3)), 1)}", true},
                {"{'it': iter((1, 2, 3))}", false},
                {"{'it': advanced(iter((1, 2)), 2)}", false}, // exhausted: 0
                {"{'it': iter([1, 2])}", false},              // list_iterator
                {"{'it': (1, 2)}", false},
                {"{}", false}}});

  C.push_back({"TupleIteratorLenZeroWhenExhausted",
               [](Builder &B) {
                 B.guard(GuardKind::TupleIteratorLen, {B.local("it")},
                         B.object("tuple_iterator", ObjectKind::Type), 0);
               },
               {{"{'it': advanced(iter((1,)), 1)}", true},
                {"{'it': iter(())}", true},
                {"{'it': iter((1,))}", false}}});

  C.push_back({"RangeIteratorMatch",
               [](Builder &B) {
                 Guard &G = B.guard(
                     GuardKind::RangeIteratorMatch, {B.local("it")},
                     B.object("range_iterator", ObjectKind::Type));
                 G.Ints = {2, 10, 2}; // normalised (start, stop, step)
               },
               {{"{'it': iter(range(2, 10, 2))}", true},
                {"{'it': advanced(iter(range(0, 10, 2)), 1)}", true},
                // Same normalised stop: 2 + len 4 * 2 = 10.
                {"{'it': iter(range(2, 9, 2))}", true},
                {"{'it': iter(range(2, 11, 2))}", false},
                {"{'it': iter(range(0, 10, 2))}", false},
                {"{'it': iter(range(2, 10, 1))}", false},
                {"{'it': iter(range(2, 10**20, 2))}", false}, // longrange
                {"{'it': range(2, 10, 2)}", false}}});

  C.push_back({"FakeScriptTypeMatch",
               [](Builder &B) {
                 B.guard(GuardKind::FakeScriptTypeMatch, {B.local("x")},
                         B.object("Real", ObjectKind::Type))
                     .Aux = B.object("FakeScript", ObjectKind::Type);
               },
               {{"{'x': Real()}", true},
                {"{'x': FakeScript(Real())}", true},
                {"{'x': FakeScriptSub(Real())}", true},
                {"{'x': LiarFake()}", true}, // isinstance honours __class__
                {"{'x': RealSub()}", false},
                {"{'x': FakeScript(RealSub())}", false},
                {"{'x': NoReal()}", false},
                {"{'x': FakeScript}", false}}});

  C.push_back({"MappingKeysMatch",
               [](Builder &B) {
                 B.guard(GuardKind::MappingKeysMatch, {B.local("m")},
                         B.object("['a', 'b']", ObjectKind::Constant));
               },
               {{"{'m': types.MappingProxyType({'a': 1, 'b': 2})}", true},
                {"{'m': {'a': 0, 'b': 0}}", true},
                {"{'m': types.MappingProxyType({'b': 1, 'a': 2})}", false},
                {"{'m': {'a': 1}}", false},
                {"{'m': KeysRaise()}", false}, // torch: NULL keys (crash)
                {"{'m': 3}", false}}});

  C.push_back({"MappingKeysRaisingCompareIsAPass",
               [](Builder &B) {
                 B.guard(GuardKind::MappingKeysMatch, {B.local("m")},
                         B.object("[BadEq()]", ObjectKind::Constant));
               },
               // list == list compares items with a raising __eq__: torch's
               // bool(-1) passes.
               {{"{'m': {BadEq(): 1}}", true}, {"{'m': {}}", false}}});

  C.push_back({"SetContains",
               [](Builder &B) {
                 B.guard(GuardKind::SetContains, {B.local("s")},
                         B.object("3", ObjectKind::Key), 1);
               },
               {{"{'s': {1, 2, 3}}", true},
                {"{'s': frozenset({3})}", true},
                {"{'s': FSet({3})}", true},
                {"{'s': {1, 2}}", false},
                {"{'s': [3]}", false},
                {"{'s': {3: 3}}", false}}});

  C.push_back({"SetNotContains",
               [](Builder &B) {
                 B.guard(GuardKind::SetContains, {B.local("s")},
                         B.object("3", ObjectKind::Key), 0);
               },
               {{"{'s': {1, 2}}", true},
                {"{'s': [3]}", true}, // not a set: r = 0 == contains
                {"{'s': {3}}", false}}});

  C.push_back({"SetContainsRaisingLookupCountsAsContained",
               [](Builder &B) {
                 B.guard(GuardKind::SetContains, {B.local("s")},
                         B.object("BadEq()", ObjectKind::Key), 0);
               },
               // Same hash, raising __eq__: PySet_Contains is -1, && makes 1.
               {{"{'s': {BadEq()}}", false}, {"{'s': set()}", true}}});

  C.push_back({"DispatchKeySetMatch",
               [](Builder &B) {
                 B.guard(GuardKind::DispatchKeySetMatch, {B.local("k")},
                         B.object("FakeDKS", ObjectKind::Type), 0x31);
               },
               {{"{'k': FakeDKS(0x31)}", true},
                {"{'k': SubDKS(0x31)}", true}, // pybind casts subclasses
                {"{'k': FakeDKS(0x30)}", false},
                {"{'k': FakeDKS(0x1)}", true,
                 "import sys; sys.modules['__gj_state__'] = 0x30"},
                {"{'k': BadDKS(0x31)}", false},
                {"{'k': 0x31}", false}}});

  C.push_back({"DualLevelMatch",
               [](Builder &B) {
                 B.guard(GuardKind::DualLevelMatch, {},
                         B.object("fwd", ObjectKind::Object), 2);
               },
               {{"{}", true, "fwd._current_level = 2"},
                {"{}", false, "fwd._current_level = 1"},
                {"{}", false, "fwd._current_level = True"},  // not exact int
                {"{}", false, "fwd._current_level = 2.0"},
                {"{}", false, "del fwd._current_level"},
                {"{}", true, "fwd._current_level = 2"}}});

  C.push_back({"SavedTensorsHooksNone",
               [](Builder &B) {
                 B.guard(GuardKind::SavedTensorsHooks, {},
                         B.object("GM", ObjectKind::Type), 0);
               },
               {{"{}", true, "saved_hooks = None"},
                {"{}", true, "saved_hooks = (len, len)"}, // not inlineable
                {"{}", true, "saved_hooks = (hp, len)"},
                {"{}", true, "saved_hooks = (len, hp)"},
                {"{}", false, "saved_hooks = (hp, hu)"},
                {"{}", false, "saved_hooks = (GMSub(), hu)"},
                {"{}", false, "saved_hooks = (RaisingClass(), hu)"},
                {"{}", false, "saved_hooks = (hp, RaisingClass())"},
                {"{}", true, "saved_hooks = (len, RaisingClass())"}, // `and`
                {"{}", true, "saved_hooks = None"}}});

  C.push_back({"SavedTensorsHooksIds",
               [](Builder &B) {
                 Guard &G = B.guard(GuardKind::SavedTensorsHooks, {},
                                    B.object("GM", ObjectKind::Type), 1);
                 for (const char *Name : {"id(hp)", "id(hu)"}) {
                   PyObject *Id = evalNew(Name);
                   G.Ints.push_back(PyLong_AsLongLong(Id));
                   Py_DECREF(Id);
                 }
               },
               {{"{}", false, "saved_hooks = None"},
                {"{}", true, "saved_hooks = (hp, hu)"},
                {"{}", false, "saved_hooks = (hu, hp)"},
                {"{}", false, "saved_hooks = (hp, GM())"},
                {"{}", false, "saved_hooks = (len, len)"},
                {"{}", true, "saved_hooks = (hp, hu)"}}});

  C.push_back({"ObjectAliasing",
               [](Builder &B) {
                 B.guard(GuardKind::ObjectAliasing,
                         {B.local("x"), B.local("y")});
               },
               {{"{'x': obj, 'y': obj}", true},
                {"{'x': [], 'y': []}", false},
                {"{'x': 1000, 'y': 1000.0}", false},
                {"{'x': obj}", false}}});

  C.push_back({"StorageOverlapping",
               [](Builder &B) {
                 // a, b may overlap; c must not overlap anything.
                 B.guard(GuardKind::StorageOverlapping,
                         {B.local("a"), B.local("b"), B.local("c")},
                         InvalidId, 2);
               },
               {{"{'a': FakeTensor(storage=(0, 4)), 'b': FakeTensor(storage=(2, "
                 "6)), 'c': FakeTensor(storage=(8, 9))}",
                 true},
                {"{'a': FakeTensor(storage=(0, 4)), 'b': FakeTensor(storage=(4, "
                 "6)), 'c': FakeTensor(storage=(8, 9))}",
                 false},
                {"{'a': FakeTensor(storage=(0, 4)), 'b': FakeTensor(storage=(2, "
                 "6)), 'c': FakeTensor(storage=(5, 9))}",
                 false},
                {"{'a': FakeTensor(storage=(0, 4)), 'b': FakeTensor(storage=(2, "
                 "6)), 'c': 3}",
                 false}}});

  C.push_back({"GradAccessor",
               [](Builder &B) {
                 B.guard(GuardKind::NoneMatch,
                         {B.child(AccessorKind::Grad, B.local("p"))});
               },
               {{"{'p': FakeTensor(None)}", true},
                {"{'p': FakeTensor(1)}", false},
                {"{'p': None}", false}}}); // not a tensor: failed read

  C.push_back({"SetGetItemAccessor",
               [](Builder &B) {
                 ValueId S = B.local("s");
                 B.guard(GuardKind::IdMatch,
                         {B.child(AccessorKind::SetGetItem, S, 0)},
                         B.object("obj"));
               },
               {{"{'s': {obj}}", true},
                {"{'s': [obj, 1]}", true}, // any iterable, as torch
                {"{'s': {1}}", false},
                {"{'s': set()}", false},   // index out of range
                {"{'s': 5}", false}}});    // not iterable

  C.push_back({"TupleIteratorGetItemAccessor",
               [](Builder &B) {
                 ValueId It = B.local("it");
                 B.guard(GuardKind::IdMatch,
                         {B.child(AccessorKind::TupleIteratorGetItem, It, 1)},
                         B.object("obj"));
               },
               {{"{'it': iter((1, obj))}", true},
                {"{'it': advanced(iter((1, 2, obj)), 1)}", true},
                {"{'it': iter((obj, 1))}", false},
                {"{'it': advanced(iter((1, obj)), 1)}", false}, // past end
                {"{'it': advanced(iter((1, obj)), 2)}", false}, // exhausted
                {"{'it': iter([1, obj])}", false},              // not a tuple
                {"{'it': (1, obj)}", false}}});
  return C;
}

/// Applies the probe's preamble: Python code, or the LocalState trick used by
/// the DispatchKeySet case (Included bits read from sys.modules).
inline void prepareProbe(const Probe &P) {
  fakeState() = LocalState();
  if (P.Before.empty())
    return;
  execPrelude(P.Before);
  PyObject *Mods = PySys_GetObject("modules");
  PyObject *V = PyDict_GetItemString(Mods, "__gj_state__");
  if (V) {
    fakeState().Included = PyLong_AsUnsignedLongLong(V);
    PyDict_DelItemString(Mods, "__gj_state__");
  }
}

} // namespace guardjit::torch213

#endif // GUARDJIT_TESTS_UNIT_COMMON_TORCH213CASES_H
