//===- LowerAccessors.cpp - Value reads -----------------------------------===//
//
// The accessors of the Guard IR (one block per value read, "v3.dict_get_item")
// and the loads they share with the guards: object fields by the offsets of
// Runtime/CPythonABI.h, the inline managed __dict__ and tuple/list item reads,
// and the DictReadCache (PEP 509) memo test in front of every dict read.
//
//===----------------------------------------------------------------------===//
#include "Lowerer.h"

#include "guardjit/Runtime/CPythonABI.h"
#include "guardjit/Runtime/RuntimeHelpers.h"

#include "llvm/IR/IRBuilder.h"

#include <cstddef>

using namespace llvm;

namespace guardjit {

llvm::Value *Lowerer::loadField(llvm::Value *Obj, size_t Offset, Type *Ty,
                          const Twine &Name) {
  llvm::Value *Addr = B.CreateConstInBoundsGEP1_64(B.getInt8Ty(), Obj, Offset);
  return B.CreateAlignedLoad(Ty, Addr, Align(abi::PointerSize), Name);
}

llvm::Value *Lowerer::loadType(llvm::Value *Obj, const Twine &Name) {
  auto *L = cast<LoadInst>(
      loadField(Obj, abi::ObjectTypeOffset, PtrTy, Name));
  // Every live object has a type: lets the optimizer drop null tests.
  L->setMetadata(LLVMContext::MD_nonnull, MDNode::get(Ctx, {}));
  return L;
}

llvm::Value *Lowerer::loadPreHeader(llvm::Value *Obj, int64_t Offset,
                                    const Twine &Name) {
  // Not inbounds of the PyObject itself, but of its allocation (the GC
  // header and pre-header precede it); a plain GEP claims nothing.
  llvm::Value *Addr = B.CreateConstGEP1_64(B.getInt8Ty(), Obj, Offset);
  return B.CreateAlignedLoad(PtrTy, Addr, Align(abi::PointerSize), Name);
}

/// GetGenericDictGuardAccessor, inline for the common case: the type has a
/// managed dict, its inline values were already turned into a dict (values
/// pointer NULL) and that dict exists. PyObject_GenericGetDict then returns
/// exactly that pointer with no side effect; every other case (values not
/// yet materialized, no dict yet, tp_dictoffset layouts, no __dict__) calls
/// gj_rt_generic_dict, which materializes or fails as Dynamo's read does.
llvm::Value *Lowerer::emitGenericDict(llvm::Value *Obj,
                                      const std::string &Name) {
  if (Compact) // the helper tests the same common case first
    return B.CreateCall(helper("gj_rt_generic_dict", PtrTy, {PtrTy}), {Obj},
                        Name);
  BasicBlock *Managed = BasicBlock::Create(Ctx, Name + ".managed", F);
  BasicBlock *Slow = BasicBlock::Create(Ctx, Name + ".slow", F);
  BasicBlock *Join = BasicBlock::Create(Ctx, Name + ".read", F);
  llvm::Value *Ty = loadType(Obj, Name + ".type");
  llvm::Value *Flags = loadField(Ty, abi::TypeFlagsOffset, I64, Name + ".flags");
  B.CreateCondBr(B.CreateICmpNE(B.CreateAnd(Flags, abi::ManagedDictFlag),
                                ConstantInt::get(I64, 0), Name + ".is_managed"),
                 Managed, Slow, Likely);

  B.SetInsertPoint(Managed);
  llvm::Value *Values =
      loadPreHeader(Obj, abi::ManagedValuesOffset, Name + ".values");
  llvm::Value *Dict = loadPreHeader(Obj, abi::ManagedDictOffset, Name + ".dict");
  llvm::Value *Ready = B.CreateAnd(B.CreateIsNull(Values, Name + ".no_values"),
                                   B.CreateIsNotNull(Dict, Name + ".has_dict"));
  BasicBlock *ManagedEnd = B.GetInsertBlock();
  B.CreateCondBr(Ready, Join, Slow, Likely);

  B.SetInsertPoint(Slow);
  llvm::Value *Read = B.CreateCall(helper("gj_rt_generic_dict", PtrTy, {PtrTy}),
                                   {Obj}, Name + ".call");
  B.CreateBr(Join);

  B.SetInsertPoint(Join);
  PHINode *Result = B.CreatePHI(PtrTy, 2, Name);
  Result->addIncoming(Dict, ManagedEnd);
  Result->addIncoming(Read, Slow);
  return Result;
}

/// PyTuple_GetItem / PyList_GetItem for a constant index >= 0, inline: the
/// subclass flag of the type, an unsigned bounds test against ob_size, then
/// the item. Exactly the checks CPython makes before returning a borrowed
/// item, so a failure here is the helper's NULL.
void Lowerer::emitInlineSequenceItem(ValueId Id, bool IsTuple) {
  const guardjit::Value &V = S.value(Id);
  llvm::Value *Parent = Vals[V.Parent];
  std::string P = prefix('v', Id);
  llvm::Value *Ty = loadType(Parent, P + ".type");
  llvm::Value *Flags = loadField(Ty, abi::TypeFlagsOffset, I64, P + ".flags");
  uint64_t Flag = IsTuple ? abi::TupleSubclassFlag : abi::ListSubclassFlag;
  failUnless(B.CreateICmpNE(B.CreateAnd(Flags, Flag),
                            ConstantInt::get(I64, 0), P + ".is_seq"));
  beginBlock(P + ".in_bounds");
  llvm::Value *Size =
      loadField(Parent, abi::VarObjectSizeOffset, I64, P + ".size");
  failUnless(B.CreateICmpULT(ConstantInt::get(I64, V.Index), Size,
                             P + ".index_ok"));
  beginBlock(P + ".item");
  llvm::Value *Items = Parent;
  size_t ItemsOffset = abi::TupleItemsOffset;
  if (!IsTuple) {
    Items = loadField(Parent, abi::ListItemsOffset, PtrTy, P + ".items");
    ItemsOffset = 0;
  }
  Vals[Id] = loadField(Items, ItemsOffset + abi::PointerSize * V.Index, PtrTy,
                       P);
}

/// The inline hit test of a DictReadCache slot (RuntimeHelpers.h explains
/// why a hit is exact): the slot's dict is `Dict`, `Dict` is still an exact
/// dict, and its PEP 509 tag is the slot's. Three compares, no call. Ends the
/// current block; returns the (empty) hit and miss blocks.
std::pair<BasicBlock *, BasicBlock *>
Lowerer::emitMemoTest(llvm::Value *Slot, llvm::Value *Dict,
                      const std::string &Name) {
  BasicBlock *CheckType = BasicBlock::Create(Ctx, Name + ".memo.type", F);
  BasicBlock *CheckTag = BasicBlock::Create(Ctx, Name + ".memo.tag", F);
  BasicBlock *Hit = BasicBlock::Create(Ctx, Name + ".memo.hit", F);
  BasicBlock *Miss = BasicBlock::Create(Ctx, Name + ".memo.miss", F);

  llvm::Value *CachedDict =
      loadField(Slot, offsetof(DictReadCache, Dict), PtrTy, Name + ".mdict");
  B.CreateCondBr(B.CreateICmpEQ(Dict, CachedDict, Name + ".same_dict"),
                 CheckType, Miss, Likely);

  B.SetInsertPoint(CheckType);
  B.CreateCondBr(B.CreateICmpEQ(loadType(Dict, Name + ".dtype"),
                                pointer(&PyDict_Type), Name + ".is_dict"),
                 CheckTag, Miss, Likely);

  B.SetInsertPoint(CheckTag);
  llvm::Value *Tag =
      loadField(Dict, abi::DictVersionTagOffset, I64, Name + ".tag");
  llvm::Value *CachedTag =
      loadField(Slot, offsetof(DictReadCache, Tag), I64, Name + ".mtag");
  B.CreateCondBr(B.CreateICmpEQ(Tag, CachedTag, Name + ".same_tag"), Hit,
                 Miss, Likely);
  return {Hit, Miss};
}

/// The hit test of emitMemoTest as one i1 in the current block, no branch:
/// the tag is loaded from the dict only when it is an exact dict, else from
/// the slot itself (a readable address whose value no longer matters, as
/// `IsDict` is false), so no load can leave the object.
llvm::Value *Lowerer::emitMemoHit(llvm::Value *Slot, llvm::Value *Dict,
                                  const std::string &Name) {
  llvm::Value *CachedDict =
      loadField(Slot, offsetof(DictReadCache, Dict), PtrTy, Name + ".mdict");
  llvm::Value *IsDict = B.CreateICmpEQ(loadType(Dict, Name + ".dtype"),
                                       pointer(&PyDict_Type), Name + ".is_dict");
  llvm::Value *TagAddr = B.CreateSelect(
      IsDict, B.CreateConstInBoundsGEP1_64(B.getInt8Ty(), Dict,
                                           abi::DictVersionTagOffset),
      B.CreateConstInBoundsGEP1_64(B.getInt8Ty(), Slot,
                                   offsetof(DictReadCache, Tag)),
      Name + ".tag_addr");
  llvm::Value *Tag =
      B.CreateAlignedLoad(I64, TagAddr, Align(abi::PointerSize), Name + ".tag");
  llvm::Value *CachedTag =
      loadField(Slot, offsetof(DictReadCache, Tag), I64, Name + ".mtag");
  return B.CreateAnd(
      B.CreateAnd(B.CreateICmpEQ(Dict, CachedDict, Name + ".same_dict"),
                  IsDict),
      B.CreateICmpEQ(Tag, CachedTag, Name + ".same_tag"), Name + ".hit");
}

/// A memoized dict read: the slot's value on a hit, else `Fill` (the
/// helper that reads and refills the slot) with `Args` + the slot.
llvm::Value *Lowerer::emitMemoRead(ValueId Id, llvm::Value *Dict,
                                   StringRef Fill, StringRef Whole,
                                   Type *ArgTy, llvm::Value *Arg,
                                   const std::string &Name) {
  llvm::Value *Slot = valueMemo(Id);
  if (CallMemo) // the key or index is in the slot's ReadDescriptor
    return B.CreateCall(helper(Whole, PtrTy, {PtrTy, PtrTy}), {Dict, Slot},
                        Name);
  if (Compact) {
    // The hit test and the slot's value in the current block, one branch
    // to the fill call: three blocks where emitMemoTest makes six.
    llvm::Value *Hit = emitMemoHit(Slot, Dict, Name);
    llvm::Value *Cached =
        loadField(Slot, offsetof(DictReadCache, Value), PtrTy, Name + ".mval");
    BasicBlock *HitEnd = B.GetInsertBlock();
    BasicBlock *Miss = BasicBlock::Create(Ctx, Name + ".memo.miss", F);
    BasicBlock *Join = BasicBlock::Create(Ctx, Name + ".read", F);
    B.CreateCondBr(Hit, Join, Miss, Likely);
    B.SetInsertPoint(Miss);
    llvm::Value *Read = B.CreateCall(helper(Fill, PtrTy, {PtrTy, ArgTy, PtrTy}),
                                     {Dict, Arg, Slot}, Name + ".fill");
    B.CreateBr(Join);
    B.SetInsertPoint(Join);
    PHINode *Result = B.CreatePHI(PtrTy, 2, Name);
    Result->addIncoming(Cached, HitEnd);
    Result->addIncoming(Read, Miss);
    return Result;
  }
  auto [Hit, Miss] = emitMemoTest(Slot, Dict, Name);
  BasicBlock *Join = BasicBlock::Create(Ctx, Name + ".read", F);

  B.SetInsertPoint(Hit);
  llvm::Value *Cached =
      loadField(Slot, offsetof(DictReadCache, Value), PtrTy, Name + ".mval");
  B.CreateBr(Join);

  B.SetInsertPoint(Miss);
  llvm::Value *Read = B.CreateCall(helper(Fill, PtrTy, {PtrTy, ArgTy, PtrTy}),
                                   {Dict, Arg, Slot}, Name + ".fill");
  B.CreateBr(Join);

  B.SetInsertPoint(Join);
  PHINode *Result = B.CreatePHI(PtrTy, 2, Name);
  Result->addIncoming(Cached, Hit);
  Result->addIncoming(Read, Miss);
  return Result;
}

/// GetAttrGuardAccessor. On an exact module (`G['torch'].relu`, `F.linear`,
/// `_global_forward_hooks`) the memo of its __dict__ read, the value
/// INCREF'd inline (the result is a new reference on every path); on a
/// miss gj_rt_module_getattr_fill; on any other object gj_rt_getattr.
llvm::Value *Lowerer::emitGetAttr(ValueId Id, llvm::Value *Parent,
                                  const std::string &Name) {
  const guardjit::Value &V = S.value(Id);
  if (CallMemo) // the name is in the slot's ReadDescriptor
    return B.CreateCall(helper("gj_rt_getattr_desc", PtrTy, {PtrTy, PtrTy}),
                        {Parent, valueMemo(Id)}, Name);
  if (Compact) // the same three ways, ahead of time
    return B.CreateCall(
        helper("gj_rt_getattr_cached", PtrTy, {PtrTy, PtrTy, PtrTy}),
        {Parent, object(V.Key), valueMemo(Id)}, Name);
  BasicBlock *Module = BasicBlock::Create(Ctx, Name + ".module", F);
  BasicBlock *Other = BasicBlock::Create(Ctx, Name + ".other", F);
  BasicBlock *Join = BasicBlock::Create(Ctx, Name + ".read", F);
  B.CreateCondBr(B.CreateICmpEQ(loadType(Parent, Name + ".type"),
                                pointer(&PyModule_Type), Name + ".is_module"),
                 Module, Other, Likely);

  B.SetInsertPoint(Module);
  llvm::Value *Slot = valueMemo(Id);
  llvm::Value *Dict =
      loadField(Parent, abi::ModuleDictOffset, PtrTy, Name + ".md_dict");
  // An empty slot holds NULL: a NULL md_dict must not reach the memo test.
  BasicBlock *HasDict = BasicBlock::Create(Ctx, Name + ".has_dict", F);
  B.CreateCondBr(B.CreateIsNull(Dict, Name + ".no_dict"), Other, HasDict);
  B.SetInsertPoint(HasDict);
  auto [Hit, Miss] = emitMemoTest(Slot, Dict, Name);
  B.SetInsertPoint(Hit);
  llvm::Value *Cached =
      loadField(Slot, offsetof(DictReadCache, Value), PtrTy, Name + ".mval");
  llvm::Value *RefCnt = loadField(Cached, 0, I64, Name + ".refcnt");
  B.CreateAlignedStore(B.CreateAdd(RefCnt, ConstantInt::get(I64, 1)), Cached,
                       Align(abi::PointerSize));
  B.CreateBr(Join);

  B.SetInsertPoint(Miss);
  llvm::Value *Filled = B.CreateCall(
      helper("gj_rt_module_getattr_fill", PtrTy, {PtrTy, PtrTy, PtrTy}),
      {Parent, object(V.Key), Slot}, Name + ".fill");
  BasicBlock *MissEnd = B.GetInsertBlock();
  B.CreateBr(Join);

  B.SetInsertPoint(Other);
  llvm::Value *Read = B.CreateCall(
      helper("gj_rt_getattr", PtrTy, {PtrTy, PtrTy}), {Parent, object(V.Key)},
      Name + ".call");
  BasicBlock *OtherEnd = B.GetInsertBlock();
  B.CreateBr(Join);

  B.SetInsertPoint(Join);
  PHINode *Result = B.CreatePHI(PtrTy, 3, Name);
  Result->addIncoming(Cached, Hit);
  Result->addIncoming(Filled, MissEnd);
  Result->addIncoming(Read, OtherEnd);
  return Result;
}

void Lowerer::emitValue(ValueId Id, LoweringStats &Stats) {
  const guardjit::Value &V = S.value(Id);
  if (V.Kind == AccessorKind::Globals) {
    // Captured at compile time: a constant, no read.
    Vals[Id] = object(V.Key);
    ++Stats.NumInlineReads;
    return;
  }
  std::string Name = prefix('v', Id);
  if (V.Kind == AccessorKind::Recorded) {
    // A slot of the bound set's recorded-object table, filled by subtree
    // skipping before this code runs: one load, never null then.
    Vals[Id] = recordedSlot(V.Index, Name);
    ++Stats.NumInlineReads;
    return;
  }
  beginBlock(Name + "." + spelling(V.Kind));
  llvm::Value *Parent = Vals[V.Parent];
  llvm::Value *Result = nullptr;
  switch (V.Kind) {
  case AccessorKind::Root:
  case AccessorKind::Globals:
  case AccessorKind::Recorded:
    llvm_unreachable("handled above");
  case AccessorKind::Type:
    assert(!accessorReturnsNewRef(V.Kind) && "inline type() is borrowed");
    Vals[Id] = loadType(Parent, Name);
    ++Stats.NumInlineReads;
    return;
  case AccessorKind::TupleGetItem:
  case AccessorKind::ListGetItem:
    // The first tier calls the descriptor read: one block instead of
    // three, and the guards after it fused into the call (or the whole
    // read into a run). Measured at O0 (docs/performance.md, "Tuple items
    // through descriptors"). The other levels inline it: a few loads and
    // two tests.
    if (CallMemo) {
      Result = B.CreateCall(
          helper(V.Kind == AccessorKind::TupleGetItem
                     ? "gj_rt_tuple_get_item_desc"
                     : "gj_rt_list_get_item_desc",
                 PtrTy, {PtrTy, PtrTy}),
          {Parent, valueMemo(Id)}, Name);
      break;
    }
    if (V.Index >= 0) {
      assert(!accessorReturnsNewRef(V.Kind) && "inline items are borrowed");
      emitInlineSequenceItem(Id, V.Kind == AccessorKind::TupleGetItem);
      ++Stats.NumInlineReads;
      return;
    }
    // Negative indices: the helper decides (it fails or wraps them).
    Result = B.CreateCall(
        helper(V.Kind == AccessorKind::TupleGetItem ? "gj_rt_tuple_get_item"
                                                    : "gj_rt_list_get_item",
               PtrTy, {PtrTy, I64}),
        {Parent, ConstantInt::get(I64, V.Index)}, Name);
    break;
  case AccessorKind::FrameLocal:
    // L[name] of the frame locals dict: the same probe as any dict item.
  case AccessorKind::DictGetItem:
    assert(accessorUsesDictCache(V.Kind) && !accessorReturnsNewRef(V.Kind));
    Result = emitMemoRead(Id, Parent, "gj_rt_dict_get_item_fill",
                          "gj_rt_dict_get_item_desc", PtrTy, object(V.Key),
                          Name);
    break;
  case AccessorKind::GenericDict:
    Result = emitGenericDict(Parent, Name);
    break;
  case AccessorKind::GetAttr:
    Result = emitGetAttr(Id, Parent, Name);
    break;
  case AccessorKind::GenericGetAttr:
    Result =
        B.CreateCall(helper("gj_rt_generic_getattr", PtrTy, {PtrTy, PtrTy}),
                     {Parent, object(V.Key)}, Name);
    break;
  case AccessorKind::Code:
    Result = CallMemo // with the fused guards' checks (ReadDescriptor)
                 ? B.CreateCall(helper("gj_rt_code_desc", PtrTy, {PtrTy, PtrTy}),
                                {Parent, valueMemo(Id)}, Name)
                 : B.CreateCall(helper("gj_rt_code", PtrTy, {PtrTy}), {Parent},
                                Name);
    break;
  case AccessorKind::GetItem:
    Result = CallMemo // the key in the ReadDescriptor
                 ? B.CreateCall(
                       helper("gj_rt_get_item_desc", PtrTy, {PtrTy, PtrTy}),
                       {Parent, valueMemo(Id)}, Name)
                 : B.CreateCall(
                       helper("gj_rt_get_item", PtrTy, {PtrTy, PtrTy}),
                       {Parent, object(V.Key)}, Name);
    break;
  case AccessorKind::Closure:
  case AccessorKind::FuncDefaults:
  case AccessorKind::FuncKwDefaults:
  case AccessorKind::TypeDict:
  case AccessorKind::TypeMro:
  case AccessorKind::CallFunctionNoArgs:
  case AccessorKind::WeakRefCall: {
    // One-argument helpers; the new-reference ones join the cleanup chain
    // below like any other (accessorReturnsNewRef).
    static constexpr std::pair<AccessorKind, const char *> Unary[] = {
        {AccessorKind::Closure, "gj_rt_closure"},
        {AccessorKind::FuncDefaults, "gj_rt_func_defaults"},
        {AccessorKind::FuncKwDefaults, "gj_rt_func_kwdefaults"},
        {AccessorKind::TypeDict, "gj_rt_type_dict"},
        {AccessorKind::TypeMro, "gj_rt_type_mro"},
        {AccessorKind::CallFunctionNoArgs, "gj_rt_call_function_no_args"},
        {AccessorKind::WeakRefCall, "gj_rt_weakref_call"},
    };
    const char *Fn = nullptr;
    for (const auto &[K, N] : Unary)
      if (K == V.Kind)
        Fn = N;
    Result = B.CreateCall(helper(Fn, PtrTy, {PtrTy}), {Parent}, Name);
    break;
  }
  case AccessorKind::Grad:
    Result = B.CreateCall(helper("gj_rt_grad", PtrTy, {PtrTy}), {Parent}, Name);
    break;
  case AccessorKind::SetGetItem:
  case AccessorKind::TupleIteratorGetItem:
    Result = B.CreateCall(
        helper(V.Kind == AccessorKind::SetGetItem
                   ? "gj_rt_set_get_item"
                   : "gj_rt_tuple_iterator_get_item",
               PtrTy, {PtrTy, I64}),
        {Parent, ConstantInt::get(I64, V.Index)}, Name);
    break;
  case AccessorKind::Lambda:
    Result = B.CreateCall(helper("gj_rt_lambda_call", PtrTy, {PtrTy, PtrTy}),
                          {object(V.Key), Parent}, Name);
    break;
  case AccessorKind::GlobalWeakRef:
    Result =
        B.CreateCall(helper("gj_rt_global_weakref", PtrTy, {PtrTy, PtrTy}),
                     {Parent, object(V.Key)}, Name);
    break;
  case AccessorKind::ContextVarGet: {
    // get(d) passes the default; get() a null pointer (the var's own
    // default, if any, applies).
    llvm::Value *Default = V.Key == InvalidId
                               ? ConstantPointerNull::get(PtrTy)
                               : static_cast<llvm::Value *>(object(V.Key));
    Result = B.CreateCall(
        helper("gj_rt_contextvar_get", PtrTy, {PtrTy, PtrTy}),
        {Parent, Default}, Name);
    break;
  }
  case AccessorKind::TensorSize:
  case AccessorKind::TensorStride:
  case AccessorKind::TensorStorageOffset: {
    // A new int from the tensor, through TorchHooks (as the interpreter).
    int Prop = V.Kind == AccessorKind::TensorSize     ? 0
               : V.Kind == AccessorKind::TensorStride ? 1
                                                      : 2;
    Result = B.CreateCall(
        helper("gj_rt_tensor_property", PtrTy, {PtrTy, I32, I64}),
        {Parent, ConstantInt::get(I32, Prop), ConstantInt::get(I64, V.Index)},
        Name);
    break;
  }
  case AccessorKind::DictKey:
  case AccessorKind::DictValue:
    assert(accessorUsesDictCache(V.Kind) && !accessorReturnsNewRef(V.Kind));
    Result = emitMemoRead(Id, Parent,
                          V.Kind == AccessorKind::DictKey
                              ? "gj_rt_dict_key_fill"
                              : "gj_rt_dict_value_fill",
                          V.Kind == AccessorKind::DictKey
                              ? "gj_rt_dict_key_desc"
                              : "gj_rt_dict_value_desc",
                          I64, ConstantInt::get(I64, V.Index), Name);
    break;
  }
  Vals[Id] = Result;
  // A NULL read fails the set; the failure does not own the NULL.
  failUnless(B.CreateIsNotNull(Result, Name + ".ok"));
  if (accessorReturnsNewRef(V.Kind) && RefsInArray) {
    // Two stores instead of a cleanup block and a release on success (each
    // a call): the array slot and the count that "fail.release" reads.
    beginBlock(Name + ".owned");
    uint64_t K = NewRefs.size();
    B.CreateAlignedStore(
        Result, B.CreateConstInBoundsGEP1_64(PtrTy, RefArray, K), Align(8));
    B.CreateAlignedStore(ConstantInt::get(I64, K + 1), RefCount, Align(8));
    useRefArray();
    NewRefs.emplace_back(Id, Result);
  } else if (accessorReturnsNewRef(V.Kind)) {
    // From here on a failure must release this reference: give it its own
    // cleanup block in front of the chain.
    beginBlock(Name + ".owned");
    BasicBlock *Release = BasicBlock::Create(Ctx, "fail.release." + Name, F);
    IRBuilder<> RB(Release);
    RB.CreateCall(helper("gj_rt_decref", RB.getVoidTy(), {PtrTy}), {Result});
    RB.CreateBr(FailTarget);
    FailTarget = Release;
    ReleaseBlocks.push_back(Release);
    NewRefs.emplace_back(Id, Result);
  }
}

void Lowerer::emitReadRun(ValueId First, size_t N, LoweringStats &Stats) {
  // The descriptors of First.. are contiguous: bind gives each value its
  // slot in id order, followed by its DICT_CONTAINS slots, and a read in a
  // run (or its path) has none (that guard would read it).
  assert(!BS || BS->readDescriptor(First + N - 1) ==
                    BS->readDescriptor(First) + (N - 1));
  std::string P = prefix('v', First);
  beginBlock(P + ".read_run");
  // The run stores the new references it reads in the frame array from
  // the count on (gj_rt_read_run): as many slots as it has such reads,
  // all filled when it passes.
  uint64_t NumOwned = 0;
  for (ValueId Id = First; Id < First + N; ++Id)
    NumOwned += accessorReturnsNewRef(S.value(Id).Kind);
  llvm::Value *Refs = ConstantPointerNull::get(PtrTy);
  llvm::Value *Count = ConstantPointerNull::get(PtrTy);
  if (NumOwned) {
    B.CreateAlignedStore(ConstantInt::get(I64, NewRefs.size()), RefCount,
                         Align(8));
    useRefArray();
    Refs = RefArray;
    Count = RefCount;
  }
  llvm::Value *Ok = B.CreateCall(
      helper("gj_rt_read_run", I32, {PtrTy, PtrTy, I64, PtrTy, PtrTy}),
      {Vals[S.value(First).Parent], valueMemo(First), ConstantInt::get(I64, N),
       Refs, Count},
      P + ".run");
  failUnless(isTrue(Ok));
  for (ValueId Id = First; Id < First + N; ++Id)
    if (accessorReturnsNewRef(S.value(Id).Kind))
      NewRefs.emplace_back(Id, nullptr); // stored by the helper
  (void)Stats; // helper reads are counted nowhere, as in emitValue
}

void Lowerer::useRefArray() {
  // Split: the entry function releases the array when the check ends.
  if (RefFail || Split)
    return;
  RefFail = BasicBlock::Create(Ctx, "fail.release", F);
  IRBuilder<> RB(RefFail);
  RB.CreateCall(helper("gj_rt_decref_array", RB.getVoidTy(), {PtrTy, I64}),
                {RefArray, RB.CreateAlignedLoad(I64, RefCount, Align(8))});
  RB.CreateBr(FailTarget);
  FailTarget = RefFail;
  ReleaseBlocks.push_back(RefFail);
}

void Lowerer::emitDictContainsRun(ArrayRef<size_t> Indices,
                                  LoweringStats &Stats) {
  const Guard &G = S.guards()[Indices.front()];
  // Consecutive DICT_CONTAINS guards of one value: consecutive slots (bind).
  assert(!BS || BS->guardDescriptor(Indices.back()) ==
                    BS->guardDescriptor(Indices.front()) +
                        (Indices.size() - 1));
  std::string P = prefix('g', Indices.front());
  beginBlock(P + ".dict_contains_run");
  Stats.NumHelpers += Indices.size();
  llvm::Value *Ok = B.CreateCall(
      helper("gj_rt_dict_contains_run", I32, {PtrTy, PtrTy, I64}),
      {Vals[G.Operands.front()], guardMemo(Indices.front()),
       ConstantInt::get(I64, Indices.size())},
      P + ".res");
  failUnless(isTrue(Ok));
}

void Lowerer::emitRelease(llvm::Value *Obj) {
  B.CreateCall(helper("gj_rt_decref", B.getVoidTy(), {PtrTy}), {Obj});
}

} // namespace guardjit
