//===- FoldImplied.cpp - Implied-guard folding ----------------------------===//
#include "guardjit/Transforms/FoldImplied.h"

#include "Rewrite.h"

#include "guardjit/IR/KindFacts.h"

using namespace guardjit;

namespace {

class Implication {
public:
  Implication(const GuardSet &S, const ObjectFacts &F) : S(S), F(F) {}

  /// Whether `A` passing implies `B` passing, for two guards on the same
  /// value (FoldImplied.h lists the rules and their reasons), by what each
  /// kind pins a passing value to (Guards.def `Pin`).
  bool implies(const Guard &A, const Guard &B) const {
    ValuePin PA = valuePin(A.Kind);
    switch (valuePin(B.Kind)) {
    case ValuePin::PinExactType:
      return impliesType(A, B.Object);
    case ValuePin::PinNotNone:
      return PA == ValuePin::PinTensorType || PA == ValuePin::PinTrue ||
             PA == ValuePin::PinFalse ||
             (PA == ValuePin::PinIdentity && F.None && address(A.Object) &&
              address(A.Object) != F.None);
    case ValuePin::PinEqual:
      return PA == ValuePin::PinIdentity && sameObject(S, A.Object, B.Object);
    default:
      return false;
    }
  }

private:
  bool impliesType(const Guard &A, ObjectId Type) const {
    switch (valuePin(A.Kind)) {
    case ValuePin::PinTensorType:
      return A.Tensor != InvalidId &&
             sameObject(S, S.tensorSpec(A.Tensor).PyType, Type);
    case ValuePin::PinIdentity:
    case ValuePin::PinEqual:
      return fixedTypeIs(address(A.Object), Type);
    case ValuePin::PinNone:
      return fixedTypeIs(F.None, Type);
    case ValuePin::PinTrue:
      return fixedTypeIs(F.True, Type);
    case ValuePin::PinFalse:
      return fixedTypeIs(F.False, Type);
    default:
      return false;
    }
  }

  uintptr_t address(ObjectId Id) const {
    return Id == InvalidId ? 0 : S.object(Id).Address;
  }

  bool fixedTypeIs(uintptr_t Obj, ObjectId Type) const {
    if (!Obj || !F.FixedTypeOf || !address(Type))
      return false;
    uintptr_t T = F.FixedTypeOf(Obj);
    return T && T == address(Type);
  }

  const GuardSet &S;
  const ObjectFacts &F;
};

} // namespace

void FoldImpliedPass::run(GuardSet &S, const PassContext &Ctx) {
  const std::vector<Guard> &Gs = S.guards();
  // Single-operand guards of each value.
  std::vector<std::vector<size_t>> OnValue(S.values().size());
  for (size_t I = 0; I < Gs.size(); ++I)
    if (Gs[I].Operands.size() == 1 && guardArity(Gs[I].Kind) == 1)
      OnValue[Gs[I].Operands[0]].push_back(I);
  Implication Imp(S, Ctx.Facts);
  std::vector<bool> Dead(Gs.size(), false);
  for (const std::vector<size_t> &Group : OnValue)
    for (size_t B : Group)
      for (size_t A : Group)
        // Implications follow an acyclic order of kinds, so whatever
        // implied a removed guard still implies it transitively.
        if (A != B && !Dead[A] && Imp.implies(Gs[A], Gs[B])) {
          Dead[B] = true;
          break;
        }
  eraseGuards(S, Dead);
}
