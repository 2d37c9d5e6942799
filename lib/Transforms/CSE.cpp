//===- CSE.cpp - Common accessor chains -----------------------------------===//
#include "guardjit/Transforms/CSE.h"

#include "Rewrite.h"

#include "guardjit/IR/KindFacts.h"

#include <map>
#include <tuple>

using namespace guardjit;

void CSEPass::run(GuardSet &S, const PassContext &) {
  size_t N = S.values().size();
  // Canonical key objects: the first key entry equal to each (sameObject).
  std::vector<ObjectId> CanonKey(S.objects().size(), InvalidId);
  std::vector<ObjectId> Reps;
  for (const Value &V : S.values()) {
    if (V.Key == InvalidId || CanonKey[V.Key] != InvalidId)
      continue;
    CanonKey[V.Key] = V.Key;
    for (ObjectId R : Reps)
      if (sameObject(S, R, V.Key)) {
        CanonKey[V.Key] = R;
        break;
      }
    if (CanonKey[V.Key] == V.Key)
      Reps.push_back(V.Key);
  }
  std::vector<ValueId> Map(N);
  std::vector<bool> Dead(N, false);
  using AccessKey =
      std::tuple<uint8_t, ValueId, std::string, int64_t, ObjectId>;
  std::map<AccessKey, ValueId> First;
  for (ValueId I = 0; I < N; ++I) {
    Map[I] = I;
    const Value &V = S.value(I);
    // Stable reads (Accessors.def) return the same object on one parent.
    if (!isStableRead(V.Kind))
      continue;
    // Parents precede children, so Map[Parent] is final.
    AccessKey K{uint8_t(V.Kind), Map[V.Parent], V.Name, V.Index,
                V.Key == InvalidId ? InvalidId : CanonKey[V.Key]};
    auto [It, Inserted] = First.try_emplace(K, I);
    if (!Inserted) {
      Map[I] = It->second;
      Dead[I] = true;
    }
  }
  rewriteValues(S, Map, Dead);
}
