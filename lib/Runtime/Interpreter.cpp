//===- Interpreter.cpp - Reference evaluator of Guard IR ------------------===//
//
// Evaluates a bound guard set the way RootGuardManager::check_nopybind does,
// as a conjunction: the check passes iff every value can be read and every
// guard passes. Values are read lazily, the first time a guard needs them
// (parents first), and the values no guard uses are read at the end: in
// Dynamo every accessor runs, so an accessor with no guards still acts as a
// "hasattr" check. Epilogue lambdas run last, on the frame locals dict.
//
// Differences from Dynamo's tree walk that never change the answer: guards
// run in IR order rather than per manager with fail-count sorting, and no
// dict-tag subtree skipping is done (see docs/guard-semantics.md §2).
//
// Per-call state lives in a thread-local frame reused across calls, so a
// steady-state check allocates nothing. A lambda guard may re-enter the
// interpreter (a compiled function called from Python inside a guard), so
// frames are a stack indexed by nesting depth.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/Interpreter.h"

#include "guardjit/Runtime/RuntimeHelpers.h"
#include "guardjit/Runtime/ShapeEval.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

using namespace guardjit;

namespace {

struct EvalFrame {
  std::vector<PyObject *> Values;
  /// Values[I] is valid for this call iff Stamp[I] == Epoch; bumping Epoch
  /// invalidates every value at once instead of clearing the array.
  std::vector<uint32_t> Stamp;
  uint32_t Epoch = 0;
  /// Values holding a new reference, released when the call ends.
  std::vector<ValueId> Owned;
  /// Operand buffer for NO_TENSOR_ALIASING and STORAGE_OVERLAPPING.
  std::vector<PyObject *> Operands;

  void begin(size_t NumValues) {
    if (Values.size() < NumValues) {
      Values.resize(NumValues);
      Stamp.resize(NumValues, 0);
    }
    if (++Epoch == 0) { // wrapped: old stamps could alias the new epoch
      std::fill(Stamp.begin(), Stamp.end(), 0);
      Epoch = 1;
    }
    Owned.clear();
  }

  void releaseOwned() {
    // Children may borrow from owned parents, and children have larger ids,
    // so release in reverse order of acquisition.
    for (size_t I = Owned.size(); I-- > 0;)
      Py_DECREF(Values[Owned[I]]);
    Owned.clear();
  }
};

thread_local std::vector<std::unique_ptr<EvalFrame>> FramePool;
thread_local size_t FrameDepth = 0;

/// Claims the frame for the current nesting depth for one call.
class FrameScope {
public:
  FrameScope() {
    if (FramePool.size() <= FrameDepth)
      FramePool.push_back(std::make_unique<EvalFrame>());
    F = FramePool[FrameDepth++].get();
  }
  ~FrameScope() {
    F->releaseOwned();
    --FrameDepth;
  }
  EvalFrame &frame() { return *F; }

private:
  EvalFrame *F;
};

class Evaluator {
public:
  Evaluator(const BoundGuardSet &B, PyObject *FrameLocals, EvalFrame &F)
      : S(B.set()), Objs(B.objects()), Recorded(B.recordedSlots()),
        FrameLocals(FrameLocals), F(F) {}

  /// Reads value `Id` (and its ancestors) if not yet read this call.
  /// Returns nullptr when some read on the path fails.
  PyObject *get(ValueId Id) {
    if (F.Stamp[Id] == F.Epoch)
      return F.Values[Id];
    const Value &V = S.value(Id);
    PyObject *Parent = nullptr;
    if (V.Kind != AccessorKind::Root && V.Kind != AccessorKind::Globals &&
        V.Kind != AccessorKind::Recorded) {
      Parent = get(V.Parent);
      if (!Parent)
        return nullptr;
    }
    PyObject *X = read(V, Parent);
    if (!X)
      return nullptr;
    F.Values[Id] = X;
    F.Stamp[Id] = F.Epoch;
    if (accessorReturnsNewRef(V.Kind))
      F.Owned.push_back(Id);
    return X;
  }

private:
  PyObject *read(const Value &V, PyObject *Parent) {
    switch (V.Kind) {
    case AccessorKind::Root:
      return FrameLocals;
    case AccessorKind::FrameLocal:
    case AccessorKind::DictGetItem:
      return gj_rt_dict_get_item(Parent, Objs[V.Key]);
    case AccessorKind::Globals:
      // GlobalsGuardAccessor ignores its input: the captured f_globals.
      return Objs[V.Key];
    case AccessorKind::GenericDict:
      return gj_rt_generic_dict(Parent);
    case AccessorKind::GetAttr:
      return gj_rt_getattr(Parent, Objs[V.Key]);
    case AccessorKind::GenericGetAttr:
      return gj_rt_generic_getattr(Parent, Objs[V.Key]);
    case AccessorKind::Code:
      return gj_rt_code(Parent);
    case AccessorKind::Type:
      return gj_rt_type(Parent);
    case AccessorKind::TupleGetItem:
      return gj_rt_tuple_get_item(Parent, V.Index);
    case AccessorKind::ListGetItem:
      return gj_rt_list_get_item(Parent, V.Index);
    case AccessorKind::GetItem:
      return gj_rt_get_item(Parent, Objs[V.Key]);
    case AccessorKind::DictKey:
      return gj_rt_dict_key(Parent, V.Index);
    case AccessorKind::DictValue:
      return gj_rt_dict_value(Parent, V.Index);
    case AccessorKind::Closure:
      return gj_rt_closure(Parent);
    case AccessorKind::FuncDefaults:
      return gj_rt_func_defaults(Parent);
    case AccessorKind::FuncKwDefaults:
      return gj_rt_func_kwdefaults(Parent);
    case AccessorKind::TypeDict:
      return gj_rt_type_dict(Parent);
    case AccessorKind::TypeMro:
      return gj_rt_type_mro(Parent);
    case AccessorKind::Lambda:
      return gj_rt_lambda_call(Objs[V.Key], Parent);
    case AccessorKind::CallFunctionNoArgs:
      return gj_rt_call_function_no_args(Parent);
    case AccessorKind::WeakRefCall:
      return gj_rt_weakref_call(Parent);
    case AccessorKind::GlobalWeakRef:
      return gj_rt_global_weakref(Parent, Objs[V.Key]);
    case AccessorKind::Grad:
      return gj_rt_grad(Parent);
    case AccessorKind::SetGetItem:
      return gj_rt_set_get_item(Parent, V.Index);
    case AccessorKind::TupleIteratorGetItem:
      return gj_rt_tuple_iterator_get_item(Parent, V.Index);
    case AccessorKind::TensorSize:
      return gj_rt_tensor_property(Parent, 0, V.Index);
    case AccessorKind::TensorStride:
      return gj_rt_tensor_property(Parent, 1, V.Index);
    case AccessorKind::TensorStorageOffset:
      return gj_rt_tensor_property(Parent, 2, V.Index);
    case AccessorKind::Recorded:
      return Recorded[V.Index];
    case AccessorKind::ContextVarGet:
      return gj_rt_contextvar_get(
          Parent, V.Key == InvalidId ? nullptr : Objs[V.Key]);
    }
    return nullptr;
  }

  const GuardSet &S;
  PyObject *const *Objs;
  PyObject *const *Recorded;
  PyObject *FrameLocals;
  EvalFrame &F;
};

} // namespace

namespace {

/// Where evaluate() failed: a guard index, else a value id (-1: none).
struct Failure {
  int64_t Guard = -1;
  int64_t Value = -1;
};

/// interpret()'s body; `Why` (null on the hot path) receives where it failed.
bool evaluate(const BoundGuardSet &B, PyObject *FrameLocals, Failure *Why) {
  auto failAt = [Why](int64_t Guard, int64_t Value) {
    if (Why)
      *Why = Failure{Guard, Value};
    return false;
  };
  const GuardSet &S = B.set();
  PyObject *const *Objs = B.objects();
  FrameScope Scope;
  EvalFrame &F = Scope.frame();
  F.begin(S.values().size());
  Evaluator E(B, FrameLocals, F);

  // Dynamo refreshes the TLS dispatch state once per root check and shares
  // the snapshot between all TENSOR_MATCH / DISPATCH_KEY_SET_MATCH guards.
  LocalState LS;
  if (B.needsLocalState())
    gj_rt_read_local_state(&LS);

  const std::vector<Guard> &Guards = S.guards();
  bool HasEpilogue = false, HasShape = false;
  for (size_t I = 0, N = Guards.size(); I < N; ++I) {
    const Guard &G = Guards[I];
    PyObject *V = nullptr;
    if (G.Kind == GuardKind::EpilogueLambda) {
      HasEpilogue = true;
      continue;
    }
    if (G.Kind == GuardKind::ShapeExpr) {
      HasShape = true;
      continue;
    }
    // Multi-operand guards read all their operands below.
    if (G.Operands.size() == 1) {
      V = E.get(G.Operands.front());
      if (!V)
        return failAt(static_cast<int64_t>(I), -1);
    }
    bool Pass;
    switch (G.Kind) {
    case GuardKind::TypeMatch:
      Pass = reinterpret_cast<PyObject *>(Py_TYPE(V)) == Objs[G.Object];
      break;
    case GuardKind::IdMatch:
      Pass = V == Objs[G.Object];
      break;
    case GuardKind::NoneMatch:
      Pass = V == Py_None;
      break;
    case GuardKind::TrueMatch:
      Pass = V == Py_True;
      break;
    case GuardKind::FalseMatch:
      Pass = V == Py_False;
      break;
    case GuardKind::NotNone:
      Pass = V != Py_None;
      break;
    case GuardKind::EqualsMatch:
      Pass = gj_rt_equals_match(V, Objs[G.Object]);
      break;
    case GuardKind::LengthCheck:
      Pass = gj_rt_length_check(V, static_cast<Py_ssize_t>(G.Int));
      break;
    case GuardKind::LengthCheckSetSize:
      Pass = gj_rt_length_check_set_size(V, static_cast<Py_ssize_t>(G.Int));
      break;
    case GuardKind::DictLength:
      Pass = gj_rt_dict_length(V, static_cast<Py_ssize_t>(G.Int));
      break;
    case GuardKind::DictContains:
      Pass = gj_rt_dict_contains(V, Objs[G.Object], G.Int != 0);
      break;
    case GuardKind::NoHasAttr:
      Pass = gj_rt_no_hasattr(V, Objs[G.Object]);
      break;
    case GuardKind::FloatIsNan:
      Pass = gj_rt_float_is_nan(V);
      break;
    case GuardKind::ComplexIsNan:
      Pass = gj_rt_complex_is_nan(V);
      break;
    case GuardKind::DictVersion:
      Pass = gj_rt_dict_version(V, static_cast<uint64_t>(G.Int));
      break;
    case GuardKind::TensorMatch:
      Pass = gj_rt_tensor_match(V, B.payload(I), &LS);
      break;
    case GuardKind::DimensionMarking:
      Pass = gj_rt_dimension_marking(V, B.payload(I));
      break;
    case GuardKind::GlobalState:
      Pass = gj_rt_global_state(B.payload(I));
      break;
    case GuardKind::DefaultDevice:
      Pass = gj_rt_default_device(Objs[G.Aux], Objs[G.Object]);
      break;
    case GuardKind::TorchFunctionModeStack:
      Pass = gj_rt_torch_function_mode_stack(B.payload(I));
      break;
    case GuardKind::NoTensorAliasing:
    case GuardKind::StorageOverlapping:
    case GuardKind::ObjectAliasing: {
      F.Operands.clear();
      for (ValueId Op : G.Operands) {
        PyObject *X = E.get(Op);
        if (!X)
          return failAt(static_cast<int64_t>(I), -1);
        F.Operands.push_back(X);
      }
      if (G.Kind == GuardKind::NoTensorAliasing)
        Pass = gj_rt_no_aliasing(F.Operands.data(), F.Operands.size());
      else if (G.Kind == GuardKind::StorageOverlapping)
        Pass = gj_rt_storage_overlapping(F.Operands.data(), F.Operands.size(),
                                         static_cast<size_t>(G.Int));
      else // OBJECT_ALIASING: the second read is the first object
        Pass = F.Operands[0] == F.Operands[1];
      break;
    }
    case GuardKind::TupleIteratorLen:
      Pass = gj_rt_tuple_iterator_len(V, Objs[G.Object],
                                      static_cast<Py_ssize_t>(G.Int));
      break;
    case GuardKind::RangeIteratorMatch:
      Pass = gj_rt_range_iterator_match(V, Objs[G.Object], G.Ints[0],
                                        G.Ints[1], G.Ints[2]);
      break;
    case GuardKind::FakeScriptTypeMatch:
      Pass = gj_rt_fake_script_type_match(V, Objs[G.Object], Objs[G.Aux]);
      break;
    case GuardKind::MappingKeysMatch:
      Pass = gj_rt_mapping_keys_match(V, Objs[G.Object]);
      break;
    case GuardKind::SetContains:
      Pass = gj_rt_set_contains(V, Objs[G.Object], G.Int != 0);
      break;
    case GuardKind::DispatchKeySetMatch:
      Pass = gj_rt_dispatch_key_set_match(V, Objs[G.Object],
                                          static_cast<uint64_t>(G.Int), &LS);
      break;
    case GuardKind::DualLevelMatch:
      Pass = gj_rt_dual_level_match(Objs[G.Object], G.Int);
      break;
    case GuardKind::SavedTensorsHooks:
      Pass = gj_rt_saved_tensors_hooks(Objs[G.Object], G.Int,
                                       G.Int ? G.Ints[0] : 0,
                                       G.Int ? G.Ints[1] : 0);
      break;
    case GuardKind::CowTensorMatch:
      Pass = gj_rt_cow_tensor_match(V, G.Int);
      break;
    case GuardKind::Lambda:
      Pass = gj_rt_lambda(Objs[G.Object], V);
      break;
    case GuardKind::EpilogueLambda:
    case GuardKind::ShapeExpr:
      Pass = true; // handled below
      break;
    }
    if (!Pass)
      return failAt(static_cast<int64_t>(I), -1);
  }

  // Accessors with no guard of their own must still succeed.
  for (ValueId Id = 1, N = static_cast<ValueId>(S.values().size()); Id < N;
       ++Id)
    if (!E.get(Id))
      return failAt(-1, Id);

  // Shape guards are Dynamo's SHAPE_ENV epilogue: after every other guard.
  if (HasShape)
    for (const Guard &G : Guards) {
      if (G.Kind != GuardKind::ShapeExpr)
        continue;
      F.Operands.clear();
      for (ValueId Op : G.Operands)
        F.Operands.push_back(E.get(Op)); // all read above: never null
      switch (evalShapeExpr(G.Expr, F.Operands.data())) {
      case ShapeOutcome::Pass:
        break;
      case ShapeOutcome::Fail:
        return failAt(&G - Guards.data(), -1);
      case ShapeOutcome::Unknown:
        // int64 / double cannot decide: Python does, or the guard fails.
        if (G.Object == InvalidId || !gj_rt_lambda(Objs[G.Object], FrameLocals))
          return failAt(&G - Guards.data(), -1);
        break;
      }
    }

  if (HasEpilogue)
    for (const Guard &G : Guards)
      if (G.Kind == GuardKind::EpilogueLambda &&
          !gj_rt_lambda(Objs[G.Object], FrameLocals))
        return failAt(&G - Guards.data(), -1);
  return true;
}

} // namespace

bool guardjit::interpret(const BoundGuardSet &B, PyObject *FrameLocals) {
  return evaluate(B, FrameLocals, nullptr);
}

std::string guardjit::explainFailure(const BoundGuardSet &B,
                                     PyObject *FrameLocals) {
  Failure Why;
  if (evaluate(B, FrameLocals, &Why))
    return "";
  if (Why.Guard >= 0)
    return describeGuard(B.set(), static_cast<size_t>(Why.Guard));
  if (Why.Value >= 0)
    return describeValue(B.set(), static_cast<ValueId>(Why.Value));
  return "an unknown guard";
}
