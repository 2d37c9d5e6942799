//===- LowerTensors.cpp - Tensor guards -----------------------------------===//
//
// TENSOR_MATCH and the other guards on one tensor (DIMENSION_DYNAMIC_MARKING,
// DISPATCH_KEY_SET_MATCH, COW_TENSOR_MATCH). They call the TorchHooks
// of lib/TorchRuntime through the gj_rt_* helpers, with the LocalState
// (dispatch keys included/excluded) read once per check in the entry block.
//
//===----------------------------------------------------------------------===//
#include "Lowerer.h"

#include "guardjit/Runtime/RuntimeHelpers.h"

#include "llvm/IR/IRBuilder.h"

using namespace llvm;

namespace guardjit {

bool Lowerer::isTensorGuard(GuardKind K) {
  return K == GuardKind::TensorMatch ||
         K == GuardKind::DimensionMarking ||
         K == GuardKind::DispatchKeySetMatch ||
         K == GuardKind::CowTensorMatch;
}

llvm::Value *Lowerer::emitTensorGuard(size_t Index, LoweringStats &Stats) {
  const Guard &G = S.guards()[Index];
  std::string P = prefix('g', Index);
  llvm::Value *V = G.Operands.empty() ? nullptr : Vals[G.Operands.front()];
  auto Call = [&](StringRef Fn, ArrayRef<Type *> Params,
                  ArrayRef<llvm::Value *> Args) {
    return callCheck(Fn, Params, Args, P, Stats);
  };
  llvm::Value *Ok = nullptr;
  switch (G.Kind) {
  case GuardKind::TensorMatch:
    Ok = Call("gj_rt_tensor_match", {PtrTy, PtrTy, PtrTy},
              {V, payload(Index), LocalStatePtr});
    break;
  case GuardKind::DimensionMarking:
    Ok = Call("gj_rt_dimension_marking", {PtrTy, PtrTy}, {V, payload(Index)});
    break;
  case GuardKind::DispatchKeySetMatch:
    Ok = Call("gj_rt_dispatch_key_set_match", {PtrTy, PtrTy, I64, PtrTy},
              {V, object(G.Object), ConstantInt::get(I64, G.Int),
               LocalStatePtr});
    break;
  case GuardKind::CowTensorMatch:
    Ok = Call("gj_rt_cow_tensor_match", {PtrTy, I64},
              {V, ConstantInt::get(I64, G.Int)});
    break;
  default:
    llvm_unreachable("not a tensor guard");
  }
  return Ok;
}

} // namespace guardjit
