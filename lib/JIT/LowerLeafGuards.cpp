//===- LowerLeafGuards.cpp - Single-value guards --------------------------===//
//
// Guards on one value (TYPE_MATCH, ID_MATCH, EQUALS_MATCH, DICT_CONTAINS, ...)
// and the ambient ones on no value (GLOBAL_STATE, DEFAULT_DEVICE, the mode
// stack, the saved-tensors hooks). Identity and type tests are inline compares; the rest call the
// gj_rt_* helper the interpreter calls (Runtime/RuntimeHelpers.h).
//
//===----------------------------------------------------------------------===//
#include "Lowerer.h"

#include "guardjit/Runtime/CPythonABI.h"
#include "guardjit/Runtime/RuntimeHelpers.h"

#include "llvm/IR/IRBuilder.h"

#include <tuple>

using namespace llvm;

namespace guardjit {

llvm::Value *Lowerer::emitLeafGuard(size_t Index, LoweringStats &Stats) {
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
  case GuardKind::TypeMatch:
    Ok = Inline(B.CreateICmpEQ(loadType(V, P + ".type"), object(G.Object)));
    break;
  case GuardKind::IdMatch:
    Ok = Inline(B.CreateICmpEQ(V, object(G.Object)));
    break;
  case GuardKind::NoneMatch:
    Ok = Inline(B.CreateICmpEQ(V, pointer(Py_None)));
    break;
  case GuardKind::TrueMatch:
    Ok = Inline(B.CreateICmpEQ(V, pointer(Py_True)));
    break;
  case GuardKind::FalseMatch:
    Ok = Inline(B.CreateICmpEQ(V, pointer(Py_False)));
    break;
  case GuardKind::NotNone:
    Ok = Inline(B.CreateICmpNE(V, pointer(Py_None)));
    break;
  case GuardKind::EqualsMatch: {
    // `v is c` implies `v == c` for Dynamo (it tests identity first too),
    // so the common case of interned constants never leaves native code.
    // The first tier leaves that test to the helper (which makes it
    // first): one block instead of three.
    if (CallMemo) {
      Ok = Call("gj_rt_equals_match", {PtrTy, PtrTy}, {V, object(G.Object)});
      break;
    }
    BasicBlock *Slow = BasicBlock::Create(Ctx, P + ".compare", F);
    BasicBlock *Done = BasicBlock::Create(Ctx, P + ".done", F);
    B.CreateCondBr(B.CreateICmpEQ(V, object(G.Object), P + ".same"), Done,
                   Slow);
    B.SetInsertPoint(Slow);
    llvm::Value *Equal = Call("gj_rt_equals_match", {PtrTy, PtrTy},
                        {V, object(G.Object)});
    B.CreateCondBr(Equal, Done, FailTarget, Likely);
    B.SetInsertPoint(Done);
    return nullptr;
  }
  case GuardKind::LengthCheck:
  case GuardKind::LengthCheckSetSize: {
    const char *Helper = G.Kind == GuardKind::LengthCheck
                             ? "gj_rt_length_check"
                             : "gj_rt_length_check_set_size";
    if (Compact) { // the helper reads ob_size of exact tuples/lists first
      Ok = Call(Helper, {PtrTy, I64}, {V, ConstantInt::get(I64, G.Int)});
      break;
    }
    // PySequence_Length of an exact tuple or list is its ob_size (their
    // sq_length); a subclass may define __len__, so it takes the helper.
    BasicBlock *Seq = BasicBlock::Create(Ctx, P + ".seq", F);
    BasicBlock *Slow = BasicBlock::Create(Ctx, P + ".call", F);
    BasicBlock *Done = BasicBlock::Create(Ctx, P + ".done", F);
    llvm::Value *Ty = loadType(V, P + ".type");
    B.CreateCondBr(
        B.CreateOr(B.CreateICmpEQ(Ty, pointer(&PyTuple_Type)),
                   B.CreateICmpEQ(Ty, pointer(&PyList_Type)), P + ".exact"),
        Seq, Slow, Likely);
    B.SetInsertPoint(Seq);
    llvm::Value *Size =
        loadField(V, abi::VarObjectSizeOffset, I64, P + ".size");
    B.CreateCondBr(B.CreateICmpEQ(Size, ConstantInt::get(I64, G.Int)), Done,
                   FailTarget, Likely);
    B.SetInsertPoint(Slow);
    llvm::Value *Equal =
        Call(Helper, {PtrTy, I64}, {V, ConstantInt::get(I64, G.Int)});
    B.CreateCondBr(Equal, Done, FailTarget, Likely);
    B.SetInsertPoint(Done);
    return nullptr;
  }
  case GuardKind::DictLength:
    Ok = Call("gj_rt_dict_length", {PtrTy, I64},
              {V, ConstantInt::get(I64, G.Int)});
    break;
  case GuardKind::DictContains: {
    // A pass memo: a hit is a pass on this same dict state; a miss probes
    // (and records a pass after a pure probe).
    assert(guardUsesDictCache(G.Kind));
    llvm::Value *Slot = guardMemo(Index);
    if (CallMemo) { // key and expected answer in the ReadDescriptor
      Ok = Call("gj_rt_dict_contains_desc", {PtrTy, PtrTy}, {V, Slot});
      break;
    }
    BasicBlock *Hit, *Miss;
    BasicBlock *Done = BasicBlock::Create(Ctx, P + ".done", F);
    if (Compact) { // the hit test in this block (emitMemoHit)
      Miss = BasicBlock::Create(Ctx, P + ".memo.miss", F);
      B.CreateCondBr(emitMemoHit(Slot, V, P), Done, Miss, Likely);
      Hit = nullptr;
    } else {
      std::tie(Hit, Miss) = emitMemoTest(Slot, V, P);
      B.SetInsertPoint(Hit);
      B.CreateBr(Done);
    }
    B.SetInsertPoint(Miss);
    llvm::Value *Pass = Call(
        "gj_rt_dict_contains_fill", {PtrTy, PtrTy, I32, PtrTy},
        {V, object(G.Object), ConstantInt::get(I32, G.Int != 0), Slot});
    B.CreateCondBr(Pass, Done, FailTarget, Likely);
    B.SetInsertPoint(Done);
    return nullptr;
  }
  case GuardKind::NoHasAttr:
    Ok = Call("gj_rt_no_hasattr", {PtrTy, PtrTy}, {V, object(G.Object)});
    break;
  case GuardKind::FloatIsNan:
    Ok = Call("gj_rt_float_is_nan", {PtrTy}, {V});
    break;
  case GuardKind::ComplexIsNan:
    Ok = Call("gj_rt_complex_is_nan", {PtrTy}, {V});
    break;
  case GuardKind::DictVersion:
    Ok = Call("gj_rt_dict_version", {PtrTy, I64},
              {V, ConstantInt::get(I64, G.Int)});
    break;
  case GuardKind::GlobalState:
    Ok = Call("gj_rt_global_state", {PtrTy}, {payload(Index)});
    break;
  case GuardKind::DefaultDevice:
    Ok = Call("gj_rt_default_device", {PtrTy, PtrTy},
              {object(G.Aux), object(G.Object)});
    break;
  case GuardKind::TorchFunctionModeStack:
    Ok = Call("gj_rt_torch_function_mode_stack", {PtrTy}, {payload(Index)});
    break;
  case GuardKind::TupleIteratorLen:
    Ok = Call("gj_rt_tuple_iterator_len", {PtrTy, PtrTy, I64},
              {V, object(G.Object), ConstantInt::get(I64, G.Int)});
    break;
  case GuardKind::RangeIteratorMatch:
    Ok = Call("gj_rt_range_iterator_match", {PtrTy, PtrTy, I64, I64, I64},
              {V, object(G.Object), ConstantInt::get(I64, G.Ints[0]),
               ConstantInt::get(I64, G.Ints[1]),
               ConstantInt::get(I64, G.Ints[2])});
    break;
  case GuardKind::FakeScriptTypeMatch:
    Ok = Call("gj_rt_fake_script_type_match", {PtrTy, PtrTy, PtrTy},
              {V, object(G.Object), object(G.Aux)});
    break;
  case GuardKind::MappingKeysMatch:
    Ok = Call("gj_rt_mapping_keys_match", {PtrTy, PtrTy},
              {V, object(G.Object)});
    break;
  case GuardKind::SetContains:
    Ok = Call("gj_rt_set_contains", {PtrTy, PtrTy, I32},
              {V, object(G.Object), ConstantInt::get(I32, G.Int != 0)});
    break;
  case GuardKind::DualLevelMatch:
    Ok = Call("gj_rt_dual_level_match", {PtrTy, I64},
              {object(G.Object), ConstantInt::get(I64, G.Int)});
    break;
  case GuardKind::SavedTensorsHooks:
    Ok = Call("gj_rt_saved_tensors_hooks", {PtrTy, I64, I64, I64},
              {object(G.Object), ConstantInt::get(I64, G.Int),
               ConstantInt::get(I64, G.Int ? G.Ints[0] : 0),
               ConstantInt::get(I64, G.Int ? G.Ints[1] : 0)});
    break;
  case GuardKind::Lambda:
    Ok = Call("gj_rt_lambda", {PtrTy, PtrTy}, {object(G.Object), V});
    break;
  case GuardKind::EpilogueLambda:
    Ok = Call("gj_rt_lambda", {PtrTy, PtrTy}, {object(G.Object), FrameLocals});
    break;
  case GuardKind::TensorMatch:
  case GuardKind::DimensionMarking:
  case GuardKind::DispatchKeySetMatch:
  case GuardKind::CowTensorMatch:
  case GuardKind::ObjectAliasing:
  case GuardKind::StorageOverlapping:
  case GuardKind::NoTensorAliasing:
  case GuardKind::ShapeExpr:
    llvm_unreachable("emitGuard dispatches these to their own files");
  }
  return Ok;
}

} // namespace guardjit
