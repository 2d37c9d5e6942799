//===- Dedup.cpp - Duplicate-guard elimination ----------------------------===//
#include "guardjit/Transforms/Dedup.h"

#include "Rewrite.h"

#include "guardjit/IR/KindFacts.h"

#include <unordered_map>

using namespace guardjit;

static bool sameTensorSpec(const GuardSet &S, uint32_t A, uint32_t B) {
  if (A == B)
    return true;
  if (A == InvalidId || B == InvalidId)
    return false;
  const TensorSpec &TA = S.tensorSpec(A), &TB = S.tensorSpec(B);
  return sameObject(S, TA.PyType, TB.PyType) &&
         TA.DispatchKeys == TB.DispatchKeys && TA.DType == TB.DType &&
         TA.DeviceIndex == TB.DeviceIndex &&
         TA.RequiresGrad == TB.RequiresGrad && TA.Sizes == TB.Sizes &&
         TA.Strides == TB.Strides;
}

// Origins are not compared: the recorder writes one copy of a check per
// Dynamo guard that asked for it (recorder._add) so that a filter keeps the
// check iff torch's rebuild has it; filters run before any structural pass
// (PassPipeline.h), so once dedup runs the copies are plain duplicates and
// the first (the one Dynamo's tree keeps) stays.
static bool sameGuard(const GuardSet &S, const Guard &A, const Guard &B) {
  // Every payload field counts: Ints (RANGE_ITERATOR_MATCH's start, stop,
  // step) and Expr (a shape expression) as much as Int and Str.
  return A.Kind == B.Kind && A.Operands == B.Operands && A.Int == B.Int &&
         A.Ints == B.Ints && A.Expr == B.Expr && A.Str == B.Str &&
         sameObject(S, A.Object, B.Object) && sameObject(S, A.Aux, B.Aux) &&
         sameTensorSpec(S, A.Tensor, B.Tensor);
}

void DedupPass::run(GuardSet &S, const PassContext &) {
  std::vector<Guard> &Gs = S.guards();
  std::vector<bool> Dead(Gs.size(), false);
  // Candidates share kind and first operand; buckets keep this linear for
  // real sets (a handful of guards per value).
  std::unordered_map<uint64_t, std::vector<size_t>> Buckets;
  for (size_t I = 0; I < Gs.size(); ++I) {
    const Guard &G = Gs[I];
    if (callsUserCode(G.Kind)) // never merged (Dedup.h)
      continue;
    uint64_t Key = (uint64_t(G.Operands.empty() ? InvalidId : G.Operands[0])
                    << 8) |
                   uint64_t(G.Kind);
    std::vector<size_t> &B = Buckets[Key];
    bool Dup = false;
    for (size_t J : B)
      if (sameGuard(S, Gs[J], G)) {
        Dup = true;
        break;
      }
    if (Dup)
      Dead[I] = true;
    else
      B.push_back(I);
  }
  eraseGuards(S, Dead);
}
