//===- ReadPlans.cpp - The first tier's descriptor reads and read paths ---===//
//
// The first tier (LoweringOptions::CallMemo) reads memoized and fused values
// through a ReadDescriptor per read (ReadPlans.h). Two IR analyses that
// mirror the lowering's schedule say which guards are checked inside a read
// (fusedReadGuards) and which reads run as one step of a table
// (readPaths); bind and the lowering, in any process, agree on both. The
// *_desc helpers run one read with its fused checks, gj_rt_read_run and
// gj_rt_dict_contains_run a table of them.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/ReadPlans.h"

#include "guardjit/Runtime/RuntimeHelpers.h"

#include "CPythonReads.h"
#include "DictReads.h"

#include <algorithm>
#include <vector>

using namespace guardjit;
using namespace guardjit::cpy;

//===----------------------------------------------------------------------===//
// Which guards fuse into a read, which reads form a path
//===----------------------------------------------------------------------===//

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
//===----------------------------------------------------------------------===//
// Descriptor reads
//===----------------------------------------------------------------------===//

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
  PyObject *V = memoHit(Dict, D->Memo) ? D->Memo.Value : Fill(Dict, D);
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
  if (memoHit(Dict, D->Memo) && fusedChecksPassQuick(D->Memo.Value, D))
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
  return memoHit(Dict, D->Memo) ||
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
