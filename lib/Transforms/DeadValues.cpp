//===- DeadValues.cpp - Dead-accessor elimination -------------------------===//
#include "guardjit/Transforms/DeadValues.h"

#include "Rewrite.h"

#include "guardjit/IR/KindFacts.h"

#include <numeric>

using namespace guardjit;

/// Whether reading value `V` cannot fail once its parent was read (see
/// DeadValues.h for each case).
static bool readCannotFail(const GuardSet &S, const Value &V) {
  switch (readFailure(V.Kind)) {
  case ReadFailure::NeverFails:
    return true;
  case ReadFailure::FailsUnlessParentIsType:
    return S.value(V.Parent).Kind == AccessorKind::Type;
  case ReadFailure::MayFail:
    return false;
  }
  return false;
}

void DeadValuesPass::run(GuardSet &S, const PassContext &) {
  ValueUses U = computeUses(S);
  size_t N = S.values().size();
  std::vector<bool> Dead(N, false);
  // Children have larger ids than their parents: one backward sweep sees
  // every child's fate before its parent's.
  for (ValueId I = N; I-- > 1;) {
    const Value &V = S.value(I);
    if (U.GuardUses[I] || U.Children[I] || !readCannotFail(S, V))
      continue;
    Dead[I] = true;
    --U.Children[V.Parent];
  }
  std::vector<ValueId> Map(N);
  std::iota(Map.begin(), Map.end(), 0);
  rewriteValues(S, Map, Dead);
}
