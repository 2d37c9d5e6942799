//===- Order.cpp - Cost-model guard ordering ------------------------------===//
//
// The model (estimates, not measurements of any one machine): a guard costs
// its own check plus the reads of its value's chain, the chain shared by the
// guards on that value; a guard fails with a fixed likelihood per kind, high
// for what changes between calls in practice (tensor shapes and dtypes of
// inputs, lengths, versions of mutated dicts), low for identities of
// modules and functions and for global state. For a conjunction, running
// guards by increasing cost / likelihood minimizes the expected cost of a
// failing check (the classic ordering of independent tests), and changes
// nothing for a passing one.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Transforms/Order.h"

#include <algorithm>
#include <numeric>

using namespace guardjit;

/// Whether a check of this kind may run Python code (a user __eq__,
/// __len__, __hash__, __getattr__, or a lambda).
static bool mayRunPython(GuardKind K) {
  switch (K) {
  case GuardKind::EqualsMatch:
  case GuardKind::LengthCheck:
  case GuardKind::LengthCheckSetSize:
  case GuardKind::DictContains:
  case GuardKind::NoHasAttr:
  case GuardKind::DimensionMarking:
  case GuardKind::Lambda:
  case GuardKind::EpilogueLambda:
  case GuardKind::SavedTensorsHooks: // isinstance() on the user's hooks
  // isinstance(x, torch.Tensor): torch.Tensor's metaclass (_TensorMeta, an
  // immutable type) keeps type.__instancecheck__, which reads `__class__`
  // of an object that is not a tensor: a Python property can run.
  case GuardKind::CowTensorMatch:
    return true;
  default:
    return false;
  }
}

static bool mayRunPython(AccessorKind K) {
  switch (K) {
  case AccessorKind::GetAttr:
  case AccessorKind::GenericGetAttr:
  case AccessorKind::GetItem:
  case AccessorKind::Lambda:
  case AccessorKind::CallFunctionNoArgs:
  case AccessorKind::ContextVarGet: // `get` of anything not a ContextVar
    return true;
  default:
    return false;
  }
}

/// Relative cost of a check, in units of one pointer compare.
static double checkCost(const Guard &G) {
  switch (G.Kind) {
  case GuardKind::TypeMatch:
  case GuardKind::IdMatch:
  case GuardKind::NoneMatch:
  case GuardKind::TrueMatch:
  case GuardKind::FalseMatch:
  case GuardKind::NotNone:
    return 1;
  case GuardKind::DictLength:
  case GuardKind::DictVersion:
  case GuardKind::FloatIsNan:
  case GuardKind::ComplexIsNan:
    return 2;
  case GuardKind::EqualsMatch:
  case GuardKind::LengthCheck:
  case GuardKind::LengthCheckSetSize:
  case GuardKind::DefaultDevice:
  case GuardKind::TorchFunctionModeStack:
    return 4;
  case GuardKind::DictContains:
    return 6;
  case GuardKind::TensorMatch:
  case GuardKind::CowTensorMatch:
    return 10;
  case GuardKind::GlobalState:
    return 20;
  case GuardKind::NoTensorAliasing:
    return 4.0 * G.Operands.size();
  case GuardKind::NoHasAttr:
  case GuardKind::DimensionMarking:
    return 30;
  case GuardKind::Lambda:
  case GuardKind::EpilogueLambda:
    return 200;
  }
  return 10;
}

/// Estimated likelihood that the check fails when the whole check fails.
static double failLikelihood(GuardKind K) {
  switch (K) {
  case GuardKind::TensorMatch:
    return 0.5;
  case GuardKind::LengthCheck:
  case GuardKind::LengthCheckSetSize:
  case GuardKind::DictLength:
  case GuardKind::DictVersion:
  case GuardKind::NoTensorAliasing:
    return 0.2;
  case GuardKind::EqualsMatch:
  case GuardKind::TypeMatch:
  case GuardKind::NoneMatch:
  case GuardKind::TrueMatch:
  case GuardKind::FalseMatch:
  case GuardKind::NotNone:
  case GuardKind::FloatIsNan:
  case GuardKind::ComplexIsNan:
    return 0.1;
  default:
    return 0.02;
  }
}

static double readCost(AccessorKind K) {
  switch (K) {
  case AccessorKind::Root:
  case AccessorKind::Globals:
    return 0;
  case AccessorKind::Type:
  case AccessorKind::Code:
  case AccessorKind::TupleGetItem:
  case AccessorKind::ListGetItem:
  case AccessorKind::TypeDict:
  case AccessorKind::TypeMro:
  case AccessorKind::Closure:
  case AccessorKind::FuncDefaults:
  case AccessorKind::FuncKwDefaults:
    return 1;
  case AccessorKind::FrameLocal:
  case AccessorKind::DictGetItem:
  case AccessorKind::GenericDict:
  case AccessorKind::WeakRefCall:
    return 3;
  case AccessorKind::DictKey:
  case AccessorKind::DictValue:
  case AccessorKind::GlobalWeakRef:
    return 5;
  case AccessorKind::GetAttr:
  case AccessorKind::GenericGetAttr:
  case AccessorKind::GetItem:
  case AccessorKind::ContextVarGet: // a HAMT lookup; a call if not a var
    return 20;
  case AccessorKind::Lambda:
  case AccessorKind::CallFunctionNoArgs:
    return 200;
  }
  return 10;
}

void OrderPass::run(GuardSet &S, const PassContext &) {
  const std::vector<Value> &Vs = S.values();
  std::vector<Guard> &Gs = S.guards();
  // Per value: the cost of its whole chain and whether it may run Python.
  std::vector<double> ChainCost(Vs.size(), 0);
  std::vector<bool> ChainRunsPython(Vs.size(), false);
  for (ValueId I = 1; I < Vs.size(); ++I) {
    const Value &V = Vs[I];
    ChainCost[I] = ChainCost[V.Parent] + readCost(V.Kind);
    ChainRunsPython[I] = ChainRunsPython[V.Parent] || mayRunPython(V.Kind);
  }
  std::vector<unsigned> GuardsOn(Vs.size(), 0);
  for (const Guard &G : Gs)
    for (ValueId Op : G.Operands)
      ++GuardsOn[Op];

  enum Class { Pure, Python, Epilogue };
  std::vector<Class> Cls(Gs.size());
  std::vector<double> Score(Gs.size(), 0);
  for (size_t I = 0; I < Gs.size(); ++I) {
    const Guard &G = Gs[I];
    bool RunsPython = mayRunPython(G.Kind);
    double Cost = checkCost(G);
    for (ValueId Op : G.Operands) {
      RunsPython |= ChainRunsPython[Op];
      Cost += ChainCost[Op] / GuardsOn[Op];
    }
    Cls[I] = G.Kind == GuardKind::EpilogueLambda ? Epilogue
             : RunsPython                         ? Python
                                                  : Pure;
    Score[I] = Cost / failLikelihood(G.Kind);
  }
  std::vector<size_t> Perm(Gs.size());
  std::iota(Perm.begin(), Perm.end(), 0);
  // Stable: Python-running guards (equal keys) keep their relative order, and
  // so do pure guards of equal score.
  std::stable_sort(Perm.begin(), Perm.end(), [&](size_t A, size_t B) {
    if (Cls[A] != Cls[B])
      return Cls[A] < Cls[B];
    return Cls[A] == Pure && Score[A] < Score[B];
  });
  std::vector<Guard> Out;
  Out.reserve(Gs.size());
  for (size_t I : Perm)
    Out.push_back(std::move(Gs[I]));
  Gs = std::move(Out);
}
