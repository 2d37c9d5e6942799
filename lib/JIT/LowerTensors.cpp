//===- LowerTensors.cpp - Tensor guards -----------------------------------===//
//
// TENSOR_MATCH and the other guards on one tensor (DIMENSION_DYNAMIC_MARKING,
// DISPATCH_KEY_SET_MATCH, COW_TENSOR_MATCH). They call the TorchHooks
// of lib/TorchRuntime through the gj_rt_* helpers, with the LocalState
// (dispatch keys included/excluded) read once per check in the entry block.
//
// TENSOR_MATCH is read inline when TorchRuntime verified the TensorImpl
// layout (TensorLayout in TorchHooks.h): the exact Python type first, then
// the TensorImpl's raw keys, policy bits, device and autograd meta decide
// whether the tensor is one the inline reading answers exactly as
// TorchHooks::tensorMatch (dense, default sizes/strides/device/layout
// policy, no Python/sparse/nested/functorch key, a device, no autograd meta,
// a plain AutogradMeta or a DifferentiableViewMeta over such a base); any
// other tensor calls the helper, which stays the reference. The expected
// values are constants from the TensorSpec.
//
//===----------------------------------------------------------------------===//
#include "Lowerer.h"

#include "guardjit/Runtime/RuntimeHelpers.h"
#include "guardjit/Runtime/TorchHooks.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/MDBuilder.h"
#include "llvm/Support/FormatVariadic.h"

using namespace llvm;

namespace guardjit {

/// The installed layout when the JIT may use it, else null.
static const TensorLayout *inlineTensorLayout() {
  const TorchHooks *H = torchHooks();
  const TensorLayout *L = H ? H->tensorLayout : nullptr;
  return L && L->Verified ? L : nullptr;
}

std::string tensorLayoutKey() {
  const TensorLayout *L = inlineTensorLayout();
  if (!L)
    return "tensor-inline=off\n";
  return formatv("tensor-inline={0},{1},{2},{3},{4},{5},{6}:{7},{8}:{9},{10},"
                 "{11},{12},{13},{14},{15},{16},{17},{18},{19}\n",
                 L->Impl, L->KeySet, L->DType, L->DeviceIndex,
                 L->DeviceEngaged, L->SizesAndStrides, L->Policy,
                 unsigned(L->PolicyMask), L->LayoutPolicy,
                 unsigned(L->LayoutPolicyMask), L->InlineDims,
                 L->AutogradMeta, L->RequiresGrad, L->GradFn, L->HelperKeys,
                 L->NumScalarTypes, TensorLayout::PayloadAutogradMetaVTable,
                 TensorLayout::PayloadViewMetaVTable, L->ViewEngaged,
                 L->ViewBase)
      .str();
}

/// A load of `Ty` at `Base + Offset`, aligned as the offset allows (the
/// objects read are 8-byte aligned).
static llvm::Value *loadAt(IRBuilder<> &B, Type *Ty, llvm::Value *Base,
                           int64_t Offset, const Twine &Name) {
  llvm::Value *Addr =
      B.CreateConstInBoundsGEP1_64(B.getInt8Ty(), Base, uint64_t(Offset));
  uint64_t Size = Ty->isPointerTy() ? 8 : Ty->getIntegerBitWidth() / 8;
  uint64_t A = 1;
  while (A < Size && Offset % int64_t(A * 2) == 0)
    A *= 2;
  return B.CreateAlignedLoad(Ty, Addr, Align(A), Name);
}

llvm::Value *Lowerer::emitInlineTensorMatch(size_t Index,
                                            const TensorLayout &L,
                                            LoweringStats &Stats) {
  const Guard &G = S.guards()[Index];
  const TensorSpec &Spec = S.tensorSpec(G.Tensor);
  std::string P = prefix('g', Index);
  llvm::Value *V = Vals[G.Operands.front()];
  Type *I8 = B.getInt8Ty(), *I16 = B.getInt16Ty(), *I1 = B.getInt1Ty();
  auto Block = [&](const char *Name) {
    return BasicBlock::Create(Ctx, P + Name, F);
  };
  BasicBlock *Read = Block(".impl"), *Meta = Block(".autograd"),
             *Fields = Block(".fields"), *Slow = Block(".helper"),
             *Join = Block(".join");
  BasicBlock *Dims = Spec.Sizes.empty() ? nullptr : Block(".dims");
  MDNode *Rare = MDBuilder(Ctx).createBranchWeights(1, 2000);
  auto *Zero8 = ConstantInt::get(I8, 0);

  // 1. The exact Python type, as the helper: a mismatch fails the guard
  // (and proves nothing about the object's layout); a match proves `V` is a
  // THPVariable.
  llvm::Value *TypeOk =
      B.CreateICmpEQ(loadType(V, P + ".type"), object(Spec.PyType));
  BasicBlock *TypeBlock = B.GetInsertBlock();
  B.CreateCondBr(TypeOk, Read, Join, Likely);

  // 2. The tensors the inline reading answers: else the helper.
  B.SetInsertPoint(Read);
  llvm::Value *Impl = loadAt(B, PtrTy, V, L.Impl, P + ".impl");
  llvm::Value *Keys = loadAt(B, I64, Impl, L.KeySet, P + ".keys");
  llvm::Value *Policy = loadAt(B, I8, Impl, L.Policy, P + ".policy");
  llvm::Value *LayoutPolicy =
      loadAt(B, I8, Impl, L.LayoutPolicy, P + ".layout_policy");
  llvm::Value *Engaged =
      loadAt(B, I8, Impl, L.DeviceEngaged, P + ".has_device");
  llvm::Value *AgMeta = loadAt(B, PtrTy, Impl, L.AutogradMeta, P + ".meta");
  llvm::Value *Other = B.CreateOr(
      {B.CreateICmpNE(B.CreateAnd(Keys, L.HelperKeys),
                      ConstantInt::get(I64, 0)),
       B.CreateICmpNE(B.CreateAnd(Policy, L.PolicyMask), Zero8),
       B.CreateICmpNE(B.CreateAnd(LayoutPolicy, L.LayoutPolicyMask), Zero8),
       B.CreateICmpNE(Engaged, ConstantInt::get(I8, 1))});
  BasicBlock *NoMeta = BasicBlock::Create(Ctx, P + ".kinds", F);
  B.CreateCondBr(Other, Slow, NoMeta, Rare);
  B.SetInsertPoint(NoMeta);
  B.CreateCondBr(B.CreateIsNull(AgMeta), Fields, Meta);

  // 3. requires_grad(): a plain AutogradMeta's is requires_grad_ ||
  // grad_fn_; a DifferentiableViewMeta's adds, when the backward view is
  // engaged, its base's (a plain meta, or none); any other class: helper.
  auto PlainRequiresGrad = [&](llvm::Value *M, const Twine &Name) {
    return B.CreateOr(
        B.CreateICmpNE(loadAt(B, I8, M, L.RequiresGrad, Name + ".rg_field"),
                       Zero8),
        B.CreateIsNotNull(loadAt(B, PtrTy, M, L.GradFn, Name + ".grad_fn")));
  };
  B.SetInsertPoint(Meta);
  llvm::Value *VTable = loadAt(B, I64, AgMeta, 0, P + ".vtable");
  llvm::Value *Pay = payload(Index);
  auto PlainVTable = [&] {
    return loadAt(B, I64, Pay, TensorLayout::PayloadAutogradMetaVTable,
                  P + ".plain_vtable");
  };
  BasicBlock *Plain = Block(".requires_grad"), *IsView = Block(".view_meta"),
             *View = Block(".view"), *Base = Block(".view_base"),
             *BaseMetaBB = Block(".base_meta"), *BasePlain = Block(".base_rg");
  B.CreateCondBr(
      B.CreateICmpEQ(VTable, PlainVTable()), Plain, IsView, Likely);
  B.SetInsertPoint(Plain);
  llvm::Value *Rg = PlainRequiresGrad(AgMeta, P);
  B.CreateBr(Fields);
  B.SetInsertPoint(IsView);
  B.CreateCondBr(
      B.CreateICmpEQ(VTable,
                     loadAt(B, I64, Pay, TensorLayout::PayloadViewMetaVTable,
                            P + ".view_vtable")),
      View, Slow);
  B.SetInsertPoint(View);
  llvm::Value *Own = PlainRequiresGrad(AgMeta, P + ".view");
  llvm::Value *HasBwView = B.CreateICmpNE(
      loadAt(B, I8, AgMeta, L.ViewEngaged, P + ".has_bw_view"), Zero8);
  B.CreateCondBr(B.CreateOr(Own, B.CreateNot(HasBwView)), Fields, Base);
  B.SetInsertPoint(Base);
  llvm::Value *BaseImpl = loadAt(B, PtrTy, AgMeta, L.ViewBase, P + ".base");
  llvm::Value *BaseMeta =
      loadAt(B, PtrTy, BaseImpl, L.AutogradMeta, P + ".base_meta");
  B.CreateCondBr(B.CreateIsNull(BaseMeta), Fields, BaseMetaBB);
  B.SetInsertPoint(BaseMetaBB);
  llvm::Value *BaseVTable = loadAt(B, I64, BaseMeta, 0, P + ".base_vtable");
  B.CreateCondBr(
      B.CreateICmpEQ(BaseVTable, PlainVTable()), BasePlain, Slow);
  B.SetInsertPoint(BasePlain);
  llvm::Value *BaseRg = PlainRequiresGrad(BaseMeta, P + ".base");
  B.CreateBr(Fields);

  // 4. The fields TensorCheck::check compares, against the spec's constants.
  B.SetInsertPoint(Fields);
  PHINode *RequiresGrad = B.CreatePHI(I1, 5, P + ".requires_grad");
  RequiresGrad->addIncoming(ConstantInt::getFalse(Ctx), NoMeta);
  RequiresGrad->addIncoming(Rg, Plain);
  RequiresGrad->addIncoming(Own, View);
  RequiresGrad->addIncoming(ConstantInt::getFalse(Ctx), Base);
  RequiresGrad->addIncoming(BaseRg, BasePlain);
  llvm::Value *Masked = B.CreateAnd(
      B.CreateOr(Keys, loadAt(B, I64, LocalStatePtr, 0, P + ".included")),
      B.CreateNot(loadAt(B, I64, LocalStatePtr, 8, P + ".excluded")));
  llvm::Value *NDim =
      loadAt(B, I64, Impl, L.SizesAndStrides, P + ".ndim");
  llvm::Value *FieldsOk = B.CreateAnd(
      {B.CreateICmpEQ(Masked, ConstantInt::get(I64, Spec.DispatchKeys)),
       B.CreateICmpEQ(loadAt(B, I16, Impl, L.DType, P + ".dtype"),
                      ConstantInt::get(I16, uint16_t(Spec.DType))),
       B.CreateICmpEQ(loadAt(B, I8, Impl, L.DeviceIndex, P + ".device"),
                      ConstantInt::get(I8, uint8_t(Spec.DeviceIndex))),
       B.CreateICmpEQ(RequiresGrad,
                      ConstantInt::getBool(Ctx, Spec.RequiresGrad)),
       B.CreateICmpEQ(NDim, ConstantInt::get(I64, Spec.Sizes.size()))});
  BasicBlock *FieldsEnd = B.GetInsertBlock();
  llvm::Value *DimsOk = nullptr;
  if (Dims) {
    B.CreateCondBr(FieldsOk, Dims, Join, Likely);
    // 5. Sizes and strides: inline storage up to InlineDims dims (the
    // ndim compare above selected the representation), a heap array beyond.
    B.SetInsertPoint(Dims);
    size_t N = Spec.Sizes.size();
    llvm::Value *Sizes;
    uint64_t StrideBase;
    if (N <= size_t(L.InlineDims)) {
      Sizes = B.CreateConstInBoundsGEP1_64(I8, Impl,
                                           uint64_t(L.SizesAndStrides) + 8);
      StrideBase = uint64_t(L.InlineDims);
    } else {
      Sizes = loadAt(B, PtrTy, Impl, L.SizesAndStrides + 8, P + ".heap");
      StrideBase = N;
    }
    SmallVector<llvm::Value *, 16> Ok;
    for (size_t I = 0; I < N; ++I) {
      if (Spec.Sizes[I])
        Ok.push_back(B.CreateICmpEQ(
            loadAt(B, I64, Sizes, int64_t(8 * I), P + ".size"),
            ConstantInt::get(I64, *Spec.Sizes[I])));
      if (Spec.Strides[I])
        Ok.push_back(B.CreateICmpEQ(
            loadAt(B, I64, Sizes, int64_t(8 * (StrideBase + I)),
                   P + ".stride"),
            ConstantInt::get(I64, *Spec.Strides[I])));
    }
    DimsOk = Ok.empty() ? ConstantInt::getTrue(Ctx) : B.CreateAnd(Ok);
    B.CreateBr(Join);
  } else {
    B.CreateBr(Join);
  }

  // 6. Everything else: the helper.
  B.SetInsertPoint(Slow);
  llvm::Value *HelperOk = isTrue(B.CreateCall(
      helper("gj_rt_tensor_match", I32, {PtrTy, PtrTy, PtrTy}),
      {V, payload(Index), LocalStatePtr}, P + ".res"));
  B.CreateBr(Join);

  B.SetInsertPoint(Join);
  PHINode *Result = B.CreatePHI(I1, 4, P + ".ok");
  Result->addIncoming(ConstantInt::getFalse(Ctx), TypeBlock);
  if (Dims) {
    Result->addIncoming(ConstantInt::getFalse(Ctx), FieldsEnd);
    Result->addIncoming(DimsOk, Dims);
  } else {
    Result->addIncoming(FieldsOk, FieldsEnd);
  }
  Result->addIncoming(HelperOk, Slow);
  ++Stats.NumInlined;
  return Result;
}

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
    // A dtype at or above NumScalarTypes makes the helper's scalar_type()
    // throw (a failed check) where the index compare could pass; bind
    // rejects specs whose sizes and strides differ in length.
    if (const TensorLayout *L = inlineTensorLayout();
        L && !G.Operands.empty() && LocalStatePtr &&
        S.tensorSpec(G.Tensor).DType >= 0 &&
        S.tensorSpec(G.Tensor).DType < L->NumScalarTypes &&
        S.tensorSpec(G.Tensor).Sizes.size() ==
            S.tensorSpec(G.Tensor).Strides.size()) {
      Ok = emitInlineTensorMatch(Index, *L, Stats);
      break;
    }
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
