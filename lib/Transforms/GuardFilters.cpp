//===- GuardFilters.cpp - torch's guard filters as passes -----------------===//
#include "guardjit/Transforms/GuardFilters.h"

#include "Rewrite.h"

#include <numeric>

using namespace guardjit;

/// A path guard: one that exists in torch's tree iff the manager of its
/// value does. The recorder writes them without an origin: the type and size
/// checks a DictGuardManager makes of itself (TYPE_MATCH / DICT_LENGTH on the
/// dict) and the EQUALS_MATCH / ID_MATCH GuardBuilder adds on a dict key
/// while it walks a source's path (get_guard_manager_from_source). They do
/// not keep their value alive; they go with it.
static bool isManagerCheck(const Guard &G) {
  return G.Origin == InvalidId && G.Operands.size() == 1 &&
         G.Kind != GuardKind::NoTensorAliasing;
}

/// torch's is_global: the source is rooted at the globals
/// (get_global_source_name in torch/_dynamo/source.py).
static bool isGlobalChain(const GuardSet &S, ValueId V) {
  for (; V != InvalidId && V != GuardSet::root(); V = S.value(V).Parent)
    if (S.value(V).Kind == AccessorKind::Globals ||
        S.value(V).Kind == AccessorKind::GlobalWeakRef)
      return true;
  return false;
}

void GuardFilterPass::run(GuardSet &S, const PassContext &) {
  std::vector<Guard> &Gs = S.guards();
  size_t NumValues = S.values().size();
  ValueUses Before = computeUses(S);
  std::vector<bool> HadTensorMatch(NumValues, false);
  for (const Guard &G : Gs)
    if (G.Kind == GuardKind::TensorMatch)
      HadTensorMatch[G.Operands[0]] = true;

  // 1. The guards of rejected origins; 3. the object-aliasing lambda.
  std::vector<bool> OriginKept;
  for (const GuardOrigin &O : S.origins())
    OriginKept.push_back(keep(O));
  std::vector<bool> DeadGuard(Gs.size(), false);
  for (size_t I = 0; I < Gs.size(); ++I) {
    const Guard &G = Gs[I];
    if (G.Origin != InvalidId)
      DeadGuard[I] = !OriginKept[G.Origin];
    else if (G.Kind == GuardKind::EpilogueLambda)
      DeadGuard[I] = unrecorded() == Unrecorded::Drop;
  }

  // 2. NO_TENSOR_ALIASING over the tensors whose TENSOR_MATCH was kept.
  std::vector<bool> KeptTensorMatch(NumValues, false);
  for (size_t I = 0; I < Gs.size(); ++I)
    if (!DeadGuard[I] && Gs[I].Kind == GuardKind::TensorMatch)
      KeptTensorMatch[Gs[I].Operands[0]] = true;
  for (size_t I = 0; I < Gs.size(); ++I) {
    Guard &G = Gs[I];
    if (DeadGuard[I] || G.Kind != GuardKind::NoTensorAliasing)
      continue;
    std::vector<ValueId> Kept;
    for (ValueId Op : G.Operands)
      if (!HadTensorMatch[Op] || KeptTensorMatch[Op])
        Kept.push_back(Op);
    DeadGuard[I] = Kept.size() <= 1;
    if (Kept.size() != G.Operands.size() && !DeadGuard[I]) {
      // As build_guards names them: the kept tensors' sources.
      std::string Names;
      for (ValueId Op : Kept)
        Names += (Names.empty() ? "" : ", ") + S.value(Op).Source;
      G.Attrs.Source = Names;
      G.Attrs.VerboseCode = "check_no_aliasing(" + Names + ")";
    }
    G.Operands = std::move(Kept);
  }

  // 4. Values: kept guards and kept children keep them.
  std::vector<bool> Guarded(NumValues, false);
  for (size_t I = 0; I < Gs.size(); ++I)
    if (!DeadGuard[I] && !isManagerCheck(Gs[I]))
      for (ValueId Op : Gs[I].Operands)
        Guarded[Op] = true;
  std::vector<bool> LiveChild(NumValues, false), DeadValue(NumValues, false);
  for (ValueId V = NumValues; V-- > 1;) {
    bool Live = Guarded[V] || LiveChild[V];
    if (!Live && S.value(V).Origin != InvalidId) {
      // torch's rebuild runs the create() that made this value, which walks
      // to it again (e.g. a HASATTR guard's accessor, or a dict whose only
      // guards are the DictGuardManager's own checks).
      Live = OriginKept[S.value(V).Origin];
    } else if (!Live && !Before.GuardUses[V] && !Before.Children[V]) {
      // A HASATTR guard's accessor without a recorded origin (parsed IR).
      switch (unrecorded()) {
      case Unrecorded::Keep:
        Live = true;
        break;
      case Unrecorded::Drop:
        break;
      case Unrecorded::DropGlobals:
        Live = !isGlobalChain(S, V);
        break;
      }
    }
    if (Live)
      LiveChild[S.value(V).Parent] = true;
    else
      DeadValue[V] = true;
  }
  // GuardBuilder creates a dict key's manager, and the key's path guard,
  // while it walks to the value at the same index (get_key_manager before
  // get_value_manager): that key stays iff that value stays.
  std::vector<bool> WalkedKey(NumValues, false);
  for (ValueId W = 1; W < NumValues; ++W) {
    const Value &E = S.value(W);
    if (DeadValue[W] || E.Kind != AccessorKind::DictValue)
      continue;
    for (ValueId V = 1; V < NumValues; ++V) {
      const Value &K = S.value(V);
      if (K.Kind == AccessorKind::DictKey && K.Parent == E.Parent &&
          K.Index == E.Index) {
        WalkedKey[V] = true;
        DeadValue[V] = false;
      }
    }
  }
  for (size_t I = 0; I < Gs.size(); ++I) {
    if (!isManagerCheck(Gs[I]))
      continue;
    ValueId V = Gs[I].Operands[0];
    DeadGuard[I] = S.value(V).Kind == AccessorKind::DictKey ? !WalkedKey[V]
                                                            : DeadValue[V];
  }

  eraseGuards(S, DeadGuard);
  std::vector<ValueId> Map(NumValues);
  std::iota(Map.begin(), Map.end(), 0);
  rewriteValues(S, Map, DeadValue);
}
