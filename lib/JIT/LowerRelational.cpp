//===- LowerRelational.cpp - Guards over several values -------------------===//
//
// OBJECT_ALIASING, NO_TENSOR_ALIASING and STORAGE_OVERLAPPING: guards whose
// operands are several values. NO_TENSOR_ALIASING and STORAGE_OVERLAPPING are
// scheduled after their last operand; the OBJECT_ALIASING guards of a set are
// fused into one block after every value (emitFusedAliasing).
//
//===----------------------------------------------------------------------===//
#include "Lowerer.h"

#include "guardjit/Runtime/CPythonABI.h"
#include "guardjit/Runtime/RuntimeHelpers.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/IR/IRBuilder.h"

using namespace llvm;

namespace guardjit {

bool Lowerer::isRelationalGuard(GuardKind K) {
  return K == GuardKind::ObjectAliasing ||
         K == GuardKind::StorageOverlapping ||
         K == GuardKind::NoTensorAliasing;
}

llvm::Value *Lowerer::emitRelationalGuard(size_t Index, LoweringStats &Stats) {
  const Guard &G = S.guards()[Index];
  std::string P = prefix('g', Index);
  auto Call = [&](StringRef Fn, ArrayRef<Type *> Params,
                  ArrayRef<llvm::Value *> Args) {
    return callCheck(Fn, Params, Args, P, Stats);
  };
  llvm::Value *Ok = nullptr;
  switch (G.Kind) {
  case GuardKind::ObjectAliasing:
    llvm_unreachable("object aliasing guards are fused (emitFusedAliasing)");
  case GuardKind::StorageOverlapping:
  case GuardKind::NoTensorAliasing: {
    // The operand array lives in the entry block's frame; filled here.
    IRBuilder<> EB(&F->getEntryBlock(), F->getEntryBlock().begin());
    size_t N = G.Operands.size();
    llvm::Value *Array = EB.CreateAlloca(ArrayType::get(PtrTy, N), nullptr,
                                   P + ".operands");
    for (size_t I = 0; I < N; ++I)
      B.CreateAlignedStore(Vals[G.Operands[I]],
                           B.CreateConstInBoundsGEP2_64(
                               ArrayType::get(PtrTy, N), Array, 0, I),
                           Align(abi::PointerSize));
    if (G.Kind == GuardKind::NoTensorAliasing)
      Ok = Call("gj_rt_no_aliasing", {PtrTy, I64},
                {Array, ConstantInt::get(I64, N)});
    else
      Ok = Call("gj_rt_storage_overlapping", {PtrTy, I64, I64},
                {Array, ConstantInt::get(I64, N),
                 ConstantInt::get(I64, G.Int)});
    break;
  }
  default:
    llvm_unreachable("not a relational guard");
  }
  return Ok;
}

/// All OBJECT_ALIASING guards of the set as one block. Each guard is
/// `x is y` over two values (plain pointers, read once each by the value
/// loop); their conjunction holds iff, in every class of values connected by
/// the guards, all members are the same object, i.e. each member equals the
/// class's first member (identity is an equivalence). So a union-find over
/// the operands gives one compare per value beyond the first of its class
/// (48 pairs `layer_i.cfg is cfg` are 48 compares against one loaded `cfg`),
/// and-ed into one branch. The interpreter checks the pairs one by one; the
/// answer is the same.
void Lowerer::emitFusedAliasing(ArrayRef<size_t> Indices,
                                LoweringStats &Stats) {
  if (Indices.empty())
    return;
  // Named after the first guard, as every guard block is.
  std::string P = prefix('g', Indices.front());
  beginBlock(P + ".object_aliasing");
  DenseMap<ValueId, ValueId> Leader;
  std::vector<ValueId> Order; // operands in first-use order
  auto Find = [&](ValueId X) {
    auto [It, New] = Leader.try_emplace(X, X);
    if (New)
      Order.push_back(X);
    while (Leader[X] != X)
      X = Leader[X] = Leader[Leader[X]];
    return X;
  };
  for (size_t I : Indices) {
    const Guard &G = S.guards()[I];
    ValueId A = Find(G.Operands[0]), C = Find(G.Operands[1]);
    if (A != C)
      Leader[std::max(A, C)] = std::min(A, C);
  }
  llvm::Value *Ok = nullptr;
  for (ValueId X : Order) {
    ValueId Rep = Find(X);
    if (Rep == X)
      continue;
    llvm::Value *Same = B.CreateICmpEQ(Vals[X], Vals[Rep], P + ".same");
    Ok = Ok ? B.CreateAnd(Ok, Same, P + ".all") : Same;
  }
  Stats.NumInlined += Indices.size();
  if (Ok) // else every guard was `x is x`
    failUnless(Ok);
}

} // namespace guardjit
