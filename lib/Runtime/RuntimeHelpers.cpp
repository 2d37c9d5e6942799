//===- RuntimeHelpers.cpp - Helpers shared by interpreter and JIT ---------===//
//
// Each helper mirrors one accessor or leaf guard of torch 2.13's
// torch/csrc/dynamo/guards.cpp (class named in the comment), with one rule
// added: a Python error is never left set. Where Dynamo leaves an error set
// and still returns a result (LENGTH_CHECK, DICT_CONTAINS, LAMBDA_GUARD with
// a raising __bool__), the helper returns Dynamo's result and clears the
// error. See docs/guard-semantics.md for the experiments behind each rule.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/RuntimeHelpers.h"

#include "DimensionMarking.h"
#include "guardjit/Runtime/CPythonABI.h"
#include "guardjit/Runtime/PythonAttr.h"

// PyDictKeysObject::dk_kind (is every key an exact str?) is only in the
// internal header; the layout is CPython 3.11's, pinned by Python.h.
#define Py_BUILD_CORE 1
#include <internal/pycore_dict.h>
#undef Py_BUILD_CORE

#include <algorithm>
#include <cmath>
#include <vector>

using namespace guardjit;

bool guardjit::accessorUsesDictCache(AccessorKind K) {
  return K == AccessorKind::FrameLocal || K == AccessorKind::DictGetItem ||
         K == AccessorKind::DictKey || K == AccessorKind::DictValue ||
         K == AccessorKind::GetAttr;
}

bool guardjit::accessorHasReadDescriptor(AccessorKind K) {
  return accessorUsesDictCache(K) || K == AccessorKind::Code ||
         K == AccessorKind::GetItem || K == AccessorKind::TupleGetItem ||
         K == AccessorKind::ListGetItem;
}

bool guardjit::guardNeedsLocalState(GuardKind K) {
  return K == GuardKind::TensorMatch || K == GuardKind::DispatchKeySetMatch;
}

bool guardjit::guardUsesDictCache(GuardKind K) {
  return K == GuardKind::DictContains;
}

std::vector<bool> guardjit::fusedReadGuards(const GuardSet &S) {
  const std::vector<Guard> &Guards = S.guards();
  const size_t NumValues = S.values().size();
  const size_t NumObjects = S.objects().size();
  std::vector<bool> Fused(Guards.size(), false);
  // The lowering's schedule (Lowering.cpp, step 3): each guard right after
  // its last operand, in IR order; shape, aliasing and epilogue guards and
  // those without operands elsewhere.
  std::vector<std::vector<uint32_t>> After(NumValues);
  for (size_t I = 0; I < Guards.size(); ++I) {
    const Guard &G = Guards[I];
    if (G.Kind == GuardKind::EpilogueLambda || G.Kind == GuardKind::ShapeExpr ||
        G.Kind == GuardKind::ObjectAliasing || G.Operands.empty())
      continue;
    ValueId Last = *std::max_element(G.Operands.begin(), G.Operands.end());
    if (Last < NumValues)
      After[Last].push_back(static_cast<uint32_t>(I));
  }
  // Targets as object ids, CPython's singletons below zero.
  constexpr int64_t None = -1, True = -2, False = -3, Unset = INT64_MIN;
  for (ValueId V = 1; V < NumValues; ++V) {
    if (!accessorHasReadDescriptor(S.value(V).Kind))
      continue;
    int64_t Type = Unset, Is = Unset, Equals = Unset;
    bool IsNot = false;
    // Sets `Field` to `Target` unless it holds another one.
    auto Claim = [](int64_t &Field, int64_t Target) {
      if (Field != Unset && Field != Target)
        return false;
      Field = Target;
      return true;
    };
    for (uint32_t I : After[V]) {
      const Guard &G = Guards[I];
      if (G.Operands.size() != 1 || G.Operands[0] != V)
        break;
      bool HasObject = G.Object < NumObjects;
      bool Ok = false;
      switch (G.Kind) {
      case GuardKind::TypeMatch:
        Ok = HasObject && Claim(Type, G.Object);
        break;
      case GuardKind::IdMatch:
        Ok = HasObject && Claim(Is, G.Object);
        break;
      case GuardKind::NoneMatch:
        Ok = Claim(Is, None);
        break;
      case GuardKind::TrueMatch:
        Ok = Claim(Is, True);
        break;
      case GuardKind::FalseMatch:
        Ok = Claim(Is, False);
        break;
      case GuardKind::NotNone:
        Ok = IsNot = true;
        break;
      case GuardKind::EqualsMatch:
        // The only one with a side effect (a user __eq__), so the last one
        // of the run: the helper tests it after the pure checks.
        Ok = HasObject && Claim(Equals, G.Object);
        break;
      default:
        break;
      }
      if (!Ok)
        break;
      Fused[I] = true;
      if (G.Kind == GuardKind::EqualsMatch)
        break;
    }
  }
  return Fused;
}

std::vector<uint32_t> guardjit::readPaths(const GuardSet &S,
                                          const std::vector<bool> &Fused) {
  const size_t NumValues = S.values().size();
  const std::vector<Guard> &Guards = S.guards();
  std::vector<uint32_t> Children(NumValues, 0);
  for (ValueId V = 1; V < NumValues; ++V)
    if (S.value(V).Parent < NumValues)
      ++Children[S.value(V).Parent];
  // Read by a guard that is not fused into its descriptor read.
  std::vector<bool> Guarded(NumValues, false);
  for (size_t I = 0; I < Guards.size(); ++I)
    if (!Fused[I])
      for (ValueId Op : Guards[I].Operands)
        if (Op < NumValues)
          Guarded[Op] = true;
  auto Steps = [&](ValueId V) {
    return accessorHasReadDescriptor(S.value(V).Kind) && !Guarded[V];
  };
  std::vector<uint32_t> Paths(NumValues, 0);
  for (ValueId V = 1; V < NumValues; ++V) {
    if (!Steps(V))
      continue;
    ValueId End = V;
    while (Children[End] == 1 && End + 1 < NumValues &&
           S.value(End + 1).Parent == End && Steps(End + 1))
      ++End;
    if (Children[End] != 0)
      continue; // not down to a read that nothing reads
    Paths[V] = End - V + 1;
    V = End;
  }
  return Paths;
}

/// Whether a probe of exact dict `D` for exact-str key was pure and left the
/// dict at version `Tag` (see DictReadCache in RuntimeHelpers.h).
static bool pureStrProbe(PyDictObject *D, uint64_t Tag) {
  return D->ma_version_tag == Tag && DK_IS_UNICODE(D->ma_keys);
}

static void fillMemo(DictReadCache *Cache, PyObject *Dict, uint64_t Tag,
                     PyObject *Value) {
  Cache->Dict = Dict;
  Cache->Tag = Tag;
  Cache->Value = Value;
}

//===----------------------------------------------------------------------===//
// Accessors
//===----------------------------------------------------------------------===//

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
  auto *D = reinterpret_cast<PyDictObject *>(Dict);
  uint64_t Tag = D->ma_version_tag;
  PyObject *X = PyDict_GetItem(Dict, Key);
  // Fill only after a pure probe (RuntimeHelpers.h). An unchanged tag means
  // nothing mutated the dict during the probe, so its keys had the kind we
  // test now throughout, and with all-str keys and a str key the probe ran
  // no user code: (Dict, Tag) -> X holds for as long as the tag does.
  if (X && pureStrProbe(D, Tag))
    fillMemo(Cache, Dict, Tag, X);
  return X;
}

/// The hit test the lowering inlines (or calls a *_cached helper for, with
/// LoweringOptions::CallMemo): same address, still an exact dict (so the
/// tag is a tag), same version.
static inline bool memoHit(PyObject *Dict, const DictReadCache *Cache) {
  return Dict == Cache->Dict && Py_TYPE(Dict) == &PyDict_Type &&
         reinterpret_cast<PyDictObject *>(Dict)->ma_version_tag == Cache->Tag;
}

extern "C" PyObject *gj_rt_dict_get_item_cached(PyObject *Dict, PyObject *Key,
                                                DictReadCache *Cache) {
  if (memoHit(Dict, Cache))
    return Cache->Value;
  return gj_rt_dict_get_item_fill(Dict, Key, Cache);
}

extern "C" PyObject *gj_rt_generic_dict(PyObject *Obj) {
  // The common case first, as the inline lowering tests it: a managed dict
  // whose inline values were already turned into a dict that exists.
  // PyObject_GenericGetDict then returns exactly that pointer with no side
  // effect.
  if (Py_TYPE(Obj)->tp_flags & abi::ManagedDictFlag) {
    auto *Base = reinterpret_cast<char *>(Obj);
    PyObject *Values =
        *reinterpret_cast<PyObject **>(Base + abi::ManagedValuesOffset);
    PyObject *Dict =
        *reinterpret_cast<PyObject **>(Base + abi::ManagedDictOffset);
    if (!Values && Dict)
      return Dict;
  }
  // GetGenericDictGuardAccessor: PyObject_GenericGetDict materializes a
  // managed (3.11 values-layout) dict and stores it in the object, exactly as
  // Dynamo's read does. The object now owns the dict, so dropping our
  // reference leaves a borrowed pointer valid for as long as `Obj` keeps that
  // __dict__ -- the same lifetime Dynamo relies on for PyDict_GetItem results.
  PyObject *Dict = PyObject_GenericGetDict(Obj, nullptr);
  if (!Dict) {
    PyErr_Clear();
    return nullptr;
  }
  Py_DECREF(Dict);
  return Dict;
}

extern "C" PyObject *gj_rt_getattr(PyObject *Obj, PyObject *Name) {
  // GetAttrGuardAccessor. Types whose attribute access runs a registered
  // Python function (nn.Module.__getattr__, transformers' config
  // __getattribute__) are read natively with the same result (PythonAttr.h).
  PyObject *Known;
  switch (knownGetAttr(Obj, Name, &Known)) {
  case AttrOutcome::Found:
    return Known;
  case AttrOutcome::Missing:
    return nullptr;
  case AttrOutcome::Unknown:
    break;
  }
  PyObject *X = PyObject_GetAttr(Obj, Name);
  if (!X)
    PyErr_Clear();
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
      auto *D = reinterpret_cast<PyDictObject *>(Dict);
      uint64_t Tag = D->ma_version_tag;
      if (PyObject *X = PyDict_GetItem(Dict, Name)) {
        if (pureStrProbe(D, Tag))
          fillMemo(Cache, Dict, Tag, X);
        return Py_NewRef(X);
      }
    }
  }
  return gj_rt_getattr(Module, Name);
}

/// gj_rt_getattr_cached, inlinable into the descriptor helpers (an
/// exported function of a shared library is not inlined: it could be
/// interposed).
static inline PyObject *getattrCached(PyObject *Obj, PyObject *Name,
                                      DictReadCache *Cache) {
  if (Py_TYPE(Obj) == &PyModule_Type) {
    PyObject *Dict = *reinterpret_cast<PyObject **>(
        reinterpret_cast<char *>(Obj) + abi::ModuleDictOffset);
    // An empty slot holds NULL: a NULL md_dict must not reach the memo test.
    if (Dict) {
      if (memoHit(Dict, Cache))
        return Py_NewRef(Cache->Value);
      return gj_rt_module_getattr_fill(Obj, Name, Cache);
    }
  }
  return gj_rt_getattr(Obj, Name);
}

extern "C" PyObject *gj_rt_getattr_cached(PyObject *Obj, PyObject *Name,
                                          DictReadCache *Cache) {
  return getattrCached(Obj, Name, Cache);
}

extern "C" PyObject *gj_rt_generic_getattr(PyObject *Obj, PyObject *Name) {
  // GenericGetAttrGuardAccessor. PyObject_GenericGetAttr raises TypeError for
  // a non-str name instead of crashing.
  PyObject *X = PyObject_GenericGetAttr(Obj, Name);
  if (!X)
    PyErr_Clear();
  return X;
}

extern "C" PyObject *gj_rt_code(PyObject *Fn) {
  // CodeGuardAccessor: unwrap bound / instance methods first.
  PyObject *Func = Fn;
  if (PyMethod_Check(Fn))
    Func = PyMethod_GET_FUNCTION(Fn);
  else if (PyInstanceMethod_Check(Fn))
    Func = PyInstanceMethod_GET_FUNCTION(Fn);
  // Sets SystemError (and returns NULL) for a non-function.
  PyObject *Code = PyFunction_GetCode(Func);
  if (!Code)
    PyErr_Clear();
  return Code;
}

extern "C" PyObject *gj_rt_type(PyObject *Obj) {
  // TypeGuardAccessor: never fails.
  return reinterpret_cast<PyObject *>(Py_TYPE(Obj));
}

extern "C" PyObject *gj_rt_tuple_get_item(PyObject *Tuple, Py_ssize_t Index) {
  // TupleGetItemGuardAccessor: PyTuple_GetItem checks the type and the bounds
  // (no negative-index normalisation) and reports both as errors.
  PyObject *X = PyTuple_GetItem(Tuple, Index);
  if (!X)
    PyErr_Clear();
  return X;
}

extern "C" PyObject *gj_rt_list_get_item(PyObject *List, Py_ssize_t Index) {
  // ListGetItemGuardAccessor, same rules as the tuple accessor.
  PyObject *X = PyList_GetItem(List, Index);
  if (!X)
    PyErr_Clear();
  return X;
}

extern "C" PyObject *gj_rt_get_item(PyObject *Obj, PyObject *Key) {
  // GetItemGuardAccessor: the full __getitem__ protocol, new reference.
  PyObject *X = PyObject_GetItem(Obj, Key);
  if (!X)
    PyErr_Clear();
  return X;
}

/// The `Index`-th live item of `Dict` in iteration (insertion) order, as
/// DictGuardManager::check_nopybind walks it: PyDict_Next with a running
/// ordinal, so deleted slots are skipped. Dynamo checks the exact type and the
/// size before walking; the recorder expresses those as separate guards, so
/// this helper only has to be safe on any input.
static bool dictItemAt(PyObject *Dict, Py_ssize_t Index, PyObject **Key,
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
    fillMemo(Cache, Dict,
             reinterpret_cast<PyDictObject *>(Dict)->ma_version_tag, K);
  return K;
}

extern "C" PyObject *gj_rt_dict_value_fill(PyObject *Dict, Py_ssize_t Index,
                                           DictReadCache *Cache) {
  PyObject *K, *V;
  if (!dictItemAt(Dict, Index, &K, &V))
    return nullptr;
  if (Py_TYPE(Dict) == &PyDict_Type)
    fillMemo(Cache, Dict,
             reinterpret_cast<PyDictObject *>(Dict)->ma_version_tag, V);
  return V;
}

extern "C" PyObject *gj_rt_dict_key_cached(PyObject *Dict, Py_ssize_t Index,
                                           DictReadCache *Cache) {
  if (memoHit(Dict, Cache))
    return Cache->Value;
  return gj_rt_dict_key_fill(Dict, Index, Cache);
}

extern "C" PyObject *gj_rt_dict_value_cached(PyObject *Dict, Py_ssize_t Index,
                                             DictReadCache *Cache) {
  if (memoHit(Dict, Cache))
    return Cache->Value;
  return gj_rt_dict_value_fill(Dict, Index, Cache);
}

/// The function object behind `Fn`, as the Code/Closure/FuncDefaults
/// accessors unwrap it: a bound method's or instancemethod's function, else
/// `Fn` itself (the PyFunction_Get* call then rejects non-functions).
static PyObject *unwrapFunction(PyObject *Fn) {
  if (PyMethod_Check(Fn))
    return PyMethod_GET_FUNCTION(Fn);
  if (PyInstanceMethod_Check(Fn))
    return PyInstanceMethod_GET_FUNCTION(Fn);
  return Fn;
}

/// PyFunction_Get{Closure,Defaults,KwDefaults}: SystemError for a
/// non-function, and NULL *without* an error when the slot is empty (no
/// closure / defaults). Both are failed reads in torch.
template <PyObject *(*Get)(PyObject *)>
static PyObject *functionSlot(PyObject *Fn) {
  PyObject *X = Get(unwrapFunction(Fn));
  if (!X)
    PyErr_Clear();
  return X;
}

extern "C" PyObject *gj_rt_closure(PyObject *Fn) {
  return functionSlot<PyFunction_GetClosure>(Fn);
}

extern "C" PyObject *gj_rt_func_defaults(PyObject *Fn) {
  return functionSlot<PyFunction_GetDefaults>(Fn);
}

extern "C" PyObject *gj_rt_func_kwdefaults(PyObject *Fn) {
  return functionSlot<PyFunction_GetKwDefaults>(Fn);
}

extern "C" PyObject *gj_rt_type_dict(PyObject *Type) {
  // TypeDictGuardAccessor reads tp_dict without checking that the input is a
  // type (Dynamo only builds it under a type); a non-type fails here instead
  // of reading past the object.
  if (!PyType_Check(Type))
    return nullptr;
  return reinterpret_cast<PyTypeObject *>(Type)->tp_dict;
}

extern "C" PyObject *gj_rt_type_mro(PyObject *Type) {
  // TypeMROGuardAccessor: as above; torch hands a NULL tp_mro (a type not
  // yet readied) to its child, which would crash -- a failed read here.
  if (!PyType_Check(Type))
    return nullptr;
  return reinterpret_cast<PyTypeObject *>(Type)->tp_mro;
}

extern "C" PyObject *gj_rt_lambda_call(PyObject *Fn, PyObject *Obj) {
  // PythonLambdaGuardAccessor: fn(obj), a raising fn fails the read.
  PyObject *X = PyObject_CallOneArg(Fn, Obj);
  if (!X)
    PyErr_Clear();
  return X;
}

extern "C" PyObject *gj_rt_call_function_no_args(PyObject *Fn) {
  // CallFunctionNoArgsGuardAccessor.
  if (!PyCallable_Check(Fn))
    return nullptr;
  PyObject *X = PyObject_CallNoArgs(Fn);
  if (!X)
    PyErr_Clear();
  return X;
}

/// PyWeakref_GetRef (3.13; torch's compat shim on 3.11) of a weakref:
/// a strong reference to the referent, or None once it died. On 3.11
/// PyWeakref_GET_OBJECT returns Py_None for a dead ref (a weakref can never
/// point to None itself).
static PyObject *derefWeak(PyObject *Ref) {
  if (!PyWeakref_Check(Ref))
    return nullptr;
  return Py_NewRef(PyWeakref_GET_OBJECT(Ref));
}

extern "C" PyObject *gj_rt_weakref_call(PyObject *Ref) {
  // WeakRefCallGuardAccessor.
  return derefWeak(Ref);
}

extern "C" PyObject *gj_rt_global_weakref(PyObject *Globals, PyObject *Name) {
  // GlobalWeakRefGuardAccessor: PyDict_GetItem (NULL for a non-dict, errors
  // swallowed on 3.11), then the weakref's referent.
  PyObject *Ref = PyDict_GetItem(Globals, Name);
  return Ref ? derefWeak(Ref) : nullptr;
}

extern "C" void gj_rt_decref(PyObject *Obj) { Py_DECREF(Obj); }

extern "C" void gj_rt_decref_array(PyObject *const *Objs, int64_t N) {
  for (int64_t I = N; I-- > 0;)
    Py_DECREF(Objs[I]);
}

//===----------------------------------------------------------------------===//
// Leaf guards
//===----------------------------------------------------------------------===//

extern "C" int gj_rt_equals_match(PyObject *Value, PyObject *Constant) {
  // EQUALS_MATCH: pointer fast path (constants are immutable or deep-copied
  // by Dynamo), then the exact type, then ==. Dynamo snapshots the constant's
  // type at construction; the bound constant is kept alive, so its type is
  // the same object here.
  if (Value == Constant)
    return 1;
  if (Py_TYPE(Value) != Py_TYPE(Constant))
    return 0;
  int R = PyObject_RichCompareBool(Value, Constant, Py_EQ);
  if (R < 0) {
    PyErr_Clear();
    return 0;
  }
  return R;
}

extern "C" int gj_rt_length_check(PyObject *Value, Py_ssize_t Length) {
  // LENGTH_CHECK: PySequence_Length(value) == n. Dynamo leaves the error of a
  // non-sequence (e.g. a dict) set; -1 never equals a recorded length. An
  // exact tuple's or list's sq_length is its ob_size (a subclass may define
  // __len__).
  if (PyTuple_CheckExact(Value) || PyList_CheckExact(Value))
    return Py_SIZE(Value) == Length;
  Py_ssize_t N = PySequence_Length(Value);
  if (N < 0)
    PyErr_Clear();
  return N == Length;
}

extern "C" int gj_rt_length_check_set_size(PyObject *Value,
                                           Py_ssize_t Length) {
  // torch 2.14.1's LENGTH_CHECK reads a set's size itself (Dynamo spells the
  // guard set.__len__(x) == n), so a subclass's __len__ is not called;
  // measured on the wheel (docs/guard-semantics.md, "length-check").
  if (PyAnySet_Check(Value))
    return PySet_GET_SIZE(Value) == Length;
  return gj_rt_length_check(Value, Length);
}

extern "C" int gj_rt_dict_length(PyObject *Value, Py_ssize_t Length) {
  // DICT_LENGTH: dict subclasses accepted.
  return PyDict_Check(Value) && PyDict_GET_SIZE(Value) == Length;
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
  auto *D = reinterpret_cast<PyDictObject *>(Dict);
  uint64_t Tag = D->ma_version_tag;
  int Pass = gj_rt_dict_contains(Dict, Key, Expected);
  // Only passes are memoized; the slot's Value is unused (set to the dict).
  if (Pass && pureStrProbe(D, Tag))
    fillMemo(Cache, Dict, Tag, Dict);
  return Pass;
}

extern "C" int gj_rt_dict_contains_cached(PyObject *Dict, PyObject *Key,
                                          int Expected, DictReadCache *Cache) {
  if (memoHit(Dict, Cache))
    return 1;
  return gj_rt_dict_contains_fill(Dict, Key, Expected, Cache);
}

/// The checks of the guards fused into a descriptor read (fusedReadGuards),
/// EQUALS_MATCH last: it alone may run Python code.
static inline bool fusedChecksPass(PyObject *V, const ReadDescriptor *D) {
  return (!D->Type || reinterpret_cast<PyObject *>(Py_TYPE(V)) == D->Type) &&
         (!D->Is || V == D->Is) && (!D->IsNot || V != D->IsNot) &&
         (!D->Equals || V == D->Equals || gj_rt_equals_match(V, D->Equals));
}

/// The fused checks that need no call (EQUALS_MATCH only by identity): a
/// memo hit that passes them returns from a leaf, without saving registers.
static inline bool fusedChecksPassQuick(PyObject *V, const ReadDescriptor *D) {
  return (!D->Type || reinterpret_cast<PyObject *>(Py_TYPE(V)) == D->Type) &&
         (!D->Is || V == D->Is) && (!D->IsNot || V != D->IsNot) &&
         (!D->Equals || V == D->Equals);
}

/// The slow paths of the memoized descriptor reads, out of line: the fill
/// (the probe) and every fused check.
__attribute__((noinline)) static PyObject *
memoDescSlow(PyObject *Dict, ReadDescriptor *D,
             PyObject *(*Fill)(PyObject *, ReadDescriptor *)) {
  PyObject *V = memoHit(Dict, &D->Memo) ? D->Memo.Value : Fill(Dict, D);
  return V && fusedChecksPass(V, D) ? V : nullptr;
}

static PyObject *dictGetItemFill(PyObject *Dict, ReadDescriptor *D) {
  return gj_rt_dict_get_item_fill(Dict, D->Key, &D->Memo);
}
static PyObject *dictKeyFill(PyObject *Dict, ReadDescriptor *D) {
  return gj_rt_dict_key_fill(Dict, D->Int, &D->Memo);
}
static PyObject *dictValueFill(PyObject *Dict, ReadDescriptor *D) {
  return gj_rt_dict_value_fill(Dict, D->Int, &D->Memo);
}

/// A memoized descriptor read: the hit test here, inlined into each
/// exported helper (exported functions are not inlined into each other:
/// see getattrCached), the fill and the fused checks out of line.
template <PyObject *(*Fill)(PyObject *, ReadDescriptor *)>
static inline PyObject *memoDesc(PyObject *Dict, ReadDescriptor *D) {
  if (memoHit(Dict, &D->Memo) && fusedChecksPassQuick(D->Memo.Value, D))
    return D->Memo.Value;
  return memoDescSlow(Dict, D, Fill);
}

extern "C" PyObject *gj_rt_dict_get_item_desc(PyObject *Dict,
                                              ReadDescriptor *D) {
  return memoDesc<dictGetItemFill>(Dict, D);
}

extern "C" PyObject *gj_rt_dict_key_desc(PyObject *Dict, ReadDescriptor *D) {
  return memoDesc<dictKeyFill>(Dict, D);
}

extern "C" PyObject *gj_rt_dict_value_desc(PyObject *Dict,
                                           ReadDescriptor *D) {
  return memoDesc<dictValueFill>(Dict, D);
}

static inline PyObject *getattrDesc(PyObject *Obj, ReadDescriptor *D) {
  PyObject *V = getattrCached(Obj, D->Key, &D->Memo);
  if (!V)
    return nullptr;
  bool Pass = fusedChecksPass(V, D);
  if (!Pass) // a failed read owns nothing
    Py_DECREF(V);
  return Pass ? V : nullptr;
}

__attribute__((noinline)) static PyObject *codeDescSlow(PyObject *Fn,
                                                        ReadDescriptor *D) {
  PyObject *V = gj_rt_code(Fn);
  return V && fusedChecksPass(V, D) ? V : nullptr;
}

static inline PyObject *codeDesc(PyObject *Fn, ReadDescriptor *D) {
  // A plain function first, from a leaf: what gj_rt_code returns for it.
  if (Py_TYPE(Fn) == &PyFunction_Type) {
    PyObject *V = PyFunction_GET_CODE(Fn);
    if (V && fusedChecksPassQuick(V, D))
      return V;
  }
  return codeDescSlow(Fn, D);
}

static inline PyObject *getItemDesc(PyObject *Obj, ReadDescriptor *D) {
  PyObject *V = gj_rt_get_item(Obj, D->Key);
  if (!V)
    return nullptr;
  bool Pass = fusedChecksPass(V, D);
  if (!Pass)
    Py_DECREF(V);
  return Pass ? V : nullptr;
}

static inline PyObject *tupleGetItemDesc(PyObject *Tuple, ReadDescriptor *D) {
  // gj_rt_tuple_get_item's answer from a leaf (PyTuple_GetItem's type and
  // bounds tests, no negative-index normalisation), then the fused checks.
  if (!PyTuple_Check(Tuple) ||
      static_cast<uint64_t>(D->Int) >=
          static_cast<uint64_t>(PyTuple_GET_SIZE(Tuple)))
    return nullptr;
  PyObject *V = PyTuple_GET_ITEM(Tuple, D->Int);
  return fusedChecksPass(V, D) ? V : nullptr;
}

static inline PyObject *listGetItemDesc(PyObject *List, ReadDescriptor *D) {
  // gj_rt_list_get_item's answer, the same way.
  if (!PyList_Check(List) || static_cast<uint64_t>(D->Int) >=
                                 static_cast<uint64_t>(PyList_GET_SIZE(List)))
    return nullptr;
  PyObject *V = PyList_GET_ITEM(List, D->Int);
  return fusedChecksPass(V, D) ? V : nullptr;
}

// The exported helpers: the bodies above, which readDesc inlines too (an
// exported function is not inlined into another: interposition).
extern "C" PyObject *gj_rt_getattr_desc(PyObject *Obj, ReadDescriptor *D) {
  return getattrDesc(Obj, D);
}
extern "C" PyObject *gj_rt_code_desc(PyObject *Fn, ReadDescriptor *D) {
  return codeDesc(Fn, D);
}
extern "C" PyObject *gj_rt_get_item_desc(PyObject *Obj, ReadDescriptor *D) {
  return getItemDesc(Obj, D);
}
extern "C" PyObject *gj_rt_tuple_get_item_desc(PyObject *Tuple,
                                              ReadDescriptor *D) {
  return tupleGetItemDesc(Tuple, D);
}
extern "C" PyObject *gj_rt_list_get_item_desc(PyObject *List,
                                             ReadDescriptor *D) {
  return listGetItemDesc(List, D);
}

extern "C" int gj_rt_dict_contains_desc(PyObject *Dict, ReadDescriptor *D) {
  return memoHit(Dict, &D->Memo) ||
         gj_rt_dict_contains_fill(Dict, D->Key, static_cast<int>(D->Int),
                                  &D->Memo);
}

/// The read of descriptor `D` from `Parent` with its fused checks, by its
/// accessor, inlined: the *_desc helper's answer (a new reference for
/// getattr and getitem reads). NULL for a failure, and for a descriptor
/// that is not a value's (bind and the lowering disagree).
static inline PyObject *readDesc(PyObject *Parent, ReadDescriptor *D) {
  switch (static_cast<AccessorKind>(D->Accessor)) {
  case AccessorKind::FrameLocal:
  case AccessorKind::DictGetItem:
    return memoDesc<dictGetItemFill>(Parent, D);
  case AccessorKind::DictKey:
    return memoDesc<dictKeyFill>(Parent, D);
  case AccessorKind::DictValue:
    return memoDesc<dictValueFill>(Parent, D);
  case AccessorKind::GetAttr:
    return getattrDesc(Parent, D);
  case AccessorKind::Code:
    return codeDesc(Parent, D);
  case AccessorKind::GetItem:
    return getItemDesc(Parent, D);
  case AccessorKind::TupleGetItem:
    return tupleGetItemDesc(Parent, D);
  case AccessorKind::ListGetItem:
    return listGetItemDesc(Parent, D);
  default:
    return nullptr;
  }
}

extern "C" int gj_rt_read_run(PyObject *Parent, ReadDescriptor *D,
                              int64_t N, PyObject **Refs, int64_t *Count) {
  for (int64_t I = 0; I < N;) {
    int64_t Len = D->Path < 2 ? 1 : D->Path;
    if (Len > N - I)
      return 0; // bind and the lowering disagree
    PyObject *V = Parent;
    for (int64_t K = 0; K < Len; ++K, ++D) {
      V = readDesc(V, D);
      if (!V)
        return 0;
      // The descriptor reads of a new reference (accessorReturnsNewRef):
      // kept until the check ends (the frame array).
      auto Kind = static_cast<AccessorKind>(D->Accessor);
      if (Kind == AccessorKind::GetAttr || Kind == AccessorKind::GetItem)
        Refs[(*Count)++] = V;
    }
    I += Len;
  }
  return 1;
}

extern "C" int gj_rt_dict_contains_run(PyObject *Dict, ReadDescriptor *D,
                                       int64_t N) {
  for (int64_t I = 0; I < N; ++I, ++D)
    if (!gj_rt_dict_contains_desc(Dict, D))
      return 0;
  return 1;
}

extern "C" int gj_rt_no_hasattr(PyObject *Value, PyObject *Name) {
  // NO_HASATTR: on 3.11 PyObject_HasAttr swallows every exception, so a
  // raising __getattr__ counts as absent: hasattr is "getattr returns a
  // value", which knownGetAttr decides without an exception when it can.
  PyObject *Known;
  switch (knownGetAttr(Value, Name, &Known)) {
  case AttrOutcome::Found:
    Py_DECREF(Known);
    return 0;
  case AttrOutcome::Missing:
    return 1;
  case AttrOutcome::Unknown:
    break;
  }
  return PyObject_HasAttr(Value, Name) == 0;
}

extern "C" int gj_rt_float_is_nan(PyObject *Value) {
  // FLOAT_IS_NAN: exact float only.
  return PyFloat_CheckExact(Value) && std::isnan(PyFloat_AS_DOUBLE(Value));
}

extern "C" int gj_rt_complex_is_nan(PyObject *Value) {
  // COMPLEX_IS_NAN: exact complex with a NaN real or imaginary part.
  if (!PyComplex_CheckExact(Value))
    return 0;
  Py_complex C = reinterpret_cast<PyComplexObject *>(Value)->cval;
  return std::isnan(C.real) || std::isnan(C.imag);
}

extern "C" int gj_rt_dict_version(PyObject *Value, uint64_t Tag) {
  // DICT_VERSION: get_dict_version_unchecked on 3.11 is ma_version_tag.
  return PyDict_Check(Value) &&
         reinterpret_cast<PyDictObject *>(Value)->ma_version_tag == Tag;
}

extern "C" int gj_rt_lambda(PyObject *Fn, PyObject *Value) {
  // LAMBDA_GUARD: a raising lambda fails. Dynamo converts PyObject_IsTrue's
  // -1 (raising __bool__) to true and leaves the error set; we keep the
  // answer and clear the error.
  PyObject *X = PyObject_CallOneArg(Fn, Value);
  if (!X) {
    PyErr_Clear();
    return 0;
  }
  int T = PyObject_IsTrue(X);
  Py_DECREF(X);
  if (T < 0) {
    PyErr_Clear();
    return 1;
  }
  return T;
}

extern "C" int gj_rt_default_device(PyObject *DeviceModuleDict,
                                    PyObject *Device) {
  // DEFAULT_DEVICE: `CURRENT_DEVICE` of torch.utils._device, by identity then
  // ==. Interned once and leaked, as Dynamo does.
  static PyObject *CurrentDeviceStr =
      PyUnicode_InternFromString("CURRENT_DEVICE");
  if (!CurrentDeviceStr) {
    PyErr_Clear();
    return 0;
  }
  PyObject *Current = PyDict_GetItem(DeviceModuleDict, CurrentDeviceStr);
  if (Current == Device)
    return 1;
  // Dynamo would hand NULL to RichCompareBool (a crash); a missing
  // CURRENT_DEVICE is a failed check here.
  if (!Current)
    return 0;
  int R = PyObject_RichCompareBool(Current, Device, Py_EQ);
  if (R < 0) {
    PyErr_Clear();
    return 0;
  }
  return R;
}

extern "C" int gj_rt_no_aliasing(PyObject *const *Objects, size_t N) {
  // NO_TENSOR_ALIASING: identity only (views of one storage are distinct).
  // Small sets are compared pairwise, which beats hashing below ~16 items.
  if (N < 2)
    return 1;
  if (N <= 16) {
    for (size_t I = 1; I < N; ++I)
      for (size_t J = 0; J < I; ++J)
        if (Objects[I] == Objects[J])
          return 0;
    return 1;
  }
  thread_local std::vector<PyObject *> Sorted;
  Sorted.assign(Objects, Objects + N);
  std::sort(Sorted.begin(), Sorted.end());
  return std::adjacent_find(Sorted.begin(), Sorted.end()) == Sorted.end();
}

//===----------------------------------------------------------------------===//
// DIMENSION_DYNAMIC_MARKING_GUARD
//===----------------------------------------------------------------------===//

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
  PyObject *Dict = nullptr;
  if (Tp->tp_flags & Py_TPFLAGS_MANAGED_DICT) {
    char *Obj = reinterpret_cast<char *>(Value);
    if (*reinterpret_cast<void **>(Obj + abi::ManagedValuesOffset))
      return false; // inline values: leave them to CPython
    Dict = *reinterpret_cast<PyObject **>(Obj + abi::ManagedDictOffset);
  } else if (PyObject **DictPtr = _PyObject_GetDictPtr(Value)) {
    // Without a managed dict this is pointer arithmetic on tp_dictoffset.
    Dict = *DictPtr;
  }
  if (!Dict)
    return true;
  // The last gate-free instance dict, unchanged (see DictReadCache): the
  // probe below would miss again. Tensors passed by one guard are usually
  // the same object call after call, with a __dict__ nobody writes.
  DictReadCache &Memo = Slot.GateFreeDict;
  auto *D = reinterpret_cast<PyDictObject *>(Dict);
  if (Dict == Memo.Dict && Py_TYPE(Dict) == &PyDict_Type &&
      D->ma_version_tag == Memo.Tag)
    return true;
  uint64_t Tag = D->ma_version_tag;
  Py_INCREF(Dict); // as the generic getattr does: a user __eq__ may drop it
  PyObject *X = PyDict_GetItemWithError(Dict, Gate);
  if (X) {
    Py_DECREF(Dict);
    return false;
  }
  if (PyErr_Occurred()) {
    // A raising lookup makes PyObject_HasAttr answer 0 as well.
    PyErr_Clear();
  } else if (Py_TYPE(Dict) == &PyDict_Type && pureStrProbe(D, Tag)) {
    Memo.Dict = Dict;
    Memo.Tag = Tag;
    Memo.Value = nullptr;
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

//===----------------------------------------------------------------------===//
// Torch guards: forwarded to the installed TorchHooks.
//===----------------------------------------------------------------------===//

extern "C" void gj_rt_read_local_state(LocalState *State) {
  if (const TorchHooks *H = torchHooks())
    H->readLocalState(State);
  else
    *State = LocalState();
}

extern "C" int gj_rt_tensor_match(PyObject *Value, const void *Payload,
                                  const LocalState *State) {
  const TorchHooks *H = torchHooks();
  return H && Payload ? H->tensorMatch(Value, Payload, State) : 0;
}

extern "C" int gj_rt_global_state(const void *Payload) {
  const TorchHooks *H = torchHooks();
  return H && Payload ? H->globalState(Payload) : 0;
}

extern "C" int gj_rt_torch_function_mode_stack(const void *Payload) {
  const TorchHooks *H = torchHooks();
  return H && Payload ? H->torchFunctionModeStack(Payload) : 0;
}
