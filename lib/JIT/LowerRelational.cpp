//===- LowerRelational.cpp - Guards over several values -------------------===//
//
// OBJECT_ALIASING, NO_TENSOR_ALIASING and STORAGE_OVERLAPPING: guards whose
// operands are several values, scheduled after the last of them.
//
//===----------------------------------------------------------------------===//
#include "Lowerer.h"

#include "guardjit/Runtime/CPythonABI.h"
#include "guardjit/Runtime/RuntimeHelpers.h"

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
  llvm::Value *V = G.Operands.empty() ? nullptr : Vals[G.Operands.front()];
  auto Call = [&](StringRef Fn, ArrayRef<Type *> Params,
                  ArrayRef<llvm::Value *> Args) {
    return callCheck(Fn, Params, Args, P, Stats);
  };
  auto Inline = [&](llvm::Value *Ok) { return inlineCheck(Ok, Stats); };
  llvm::Value *Ok = nullptr;
  switch (G.Kind) {
  case GuardKind::ObjectAliasing:
    // Both reads are plain pointers: `x is y` is one compare.
    Ok = Inline(B.CreateICmpEQ(V, Vals[G.Operands[1]], P + ".same"));
    break;
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

} // namespace guardjit
