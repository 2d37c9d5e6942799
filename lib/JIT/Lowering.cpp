//===- Lowering.cpp - Guard IR to LLVM IR ---------------------------------===//
//
// The generated function is the interpreter (lib/Runtime/Interpreter.cpp)
// unrolled over one guard set, in the way PostgreSQL's llvmjit_expr.c unrolls
// its expression interpreter: one block per step, hard steps call the same
// helper the interpreter calls, so the two cannot disagree on them.
//
// Order of evaluation (the answer is a conjunction, so order only affects
// speed): root guards without operands, then each value in id order followed
// at once by the guards whose last operand it is (the object was just
// touched), then epilogue lambdas over the frame locals.
//
// New references are released through a chain of cleanup blocks: a failure
// after the k-th new reference branches to "fail.release.vN" of that
// reference, which releases it and falls into the one before, ending in the
// common "fail" block. This keeps the function in SSA form with no allocas
// and no null tests on the failure path.
//
//===----------------------------------------------------------------------===//
#include "guardjit/JIT/Lowering.h"

#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/CPythonABI.h"
#include "guardjit/Runtime/RuntimeHelpers.h"
#include "guardjit/Runtime/ShapeEval.h"
#include "guardjit/Runtime/TorchHooks.h"

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/MDBuilder.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstddef>

using namespace llvm;

namespace guardjit {

// The generated code passes a pointer to this struct to the torch hooks.
static_assert(sizeof(LocalState) == 16 && alignof(LocalState) == 8 &&
                  offsetof(LocalState, Included) == 0 &&
                  offsetof(LocalState, Excluded) == 8,
              "LocalState is lowered as [2 x i64]");

// The generated code reads DictReadCache slots as {ptr, i64, ptr}.
static_assert(sizeof(DictReadCache) == 24 &&
                  offsetof(DictReadCache, Dict) == 0 &&
                  offsetof(DictReadCache, Tag) == 8 &&
                  offsetof(DictReadCache, Value) == 16,
              "DictReadCache is lowered as {ptr, i64, ptr}");

namespace {

class Lowerer {
public:
  /// `BS` null lowers `S` with symbolic addresses (lowerGuardSetSymbolic).
  Lowerer(const GuardSet &S, const BoundGuardSet *BS, Module &M)
      : BS(BS), S(S), M(M), Ctx(M.getContext()), B(Ctx),
        PtrTy(PointerType::getUnqual(Ctx)), I32(Type::getInt32Ty(Ctx)),
        I64(Type::getInt64Ty(Ctx)),
        Likely(MDBuilder(Ctx).createLikelyBranchWeights()) {}

  Expected<Function *> run(StringRef Name, LoweringStats &Stats);

private:
  Error validate() const;
  std::string describe(size_t GuardIndex) const;

  FunctionCallee helper(StringRef Name, Type *Ret, ArrayRef<Type *> Params);
  Constant *pointer(const void *Address);
  /// The addresses of the BoundGuardSet, or symbols standing for them.
  Constant *object(ObjectId Id) {
    return BS ? pointer(BS->object(Id)) : symbol("gj.obj." + Twine(Id));
  }
  Constant *payload(size_t GuardIndex) {
    return BS ? pointer(BS->payload(GuardIndex))
              : symbol("gj.payload.g" + Twine(GuardIndex));
  }
  Constant *valueMemo(ValueId Id) {
    return BS ? pointer(BS->dictCache(Id)) : symbol("gj.memo.v" + Twine(Id));
  }
  Constant *guardMemo(size_t GuardIndex) {
    return BS ? pointer(BS->guardCache(GuardIndex))
              : symbol("gj.memo.g" + Twine(GuardIndex));
  }
  /// An external global named `Name` (symbolic lowering only).
  Constant *symbol(const Twine &Name) {
    return M.getOrInsertGlobal(Name.str(), B.getInt8Ty());
  }
  /// As BoundGuardSet::needsLocalState, which binding computes from the kinds.
  bool needsLocalState() const {
    return BS ? BS->needsLocalState()
              : std::any_of(S.guards().begin(), S.guards().end(),
                            [](const Guard &G) {
                              return guardNeedsLocalState(G.Kind);
                            });
  }
  /// "v3" / "g12": the stem of a step's names, empty when the context
  /// discards names anyway (compile(), where they only cost time).
  std::string prefix(char Kind, size_t N) const {
    return Ctx.shouldDiscardValueNames() ? std::string()
                                         : Kind + std::to_string(N);
  }

  /// Ends the current block (branching to the new one, or to the current
  /// failure target when `PendingOk` is false) and starts block `Name`.
  void beginBlock(const Twine &Name);
  /// Makes the next beginBlock branch to the failure target unless `Ok`.
  void failUnless(llvm::Value *Ok) {
    assert(!PendingOk && "one pending condition at a time");
    PendingOk = Ok;
  }
  llvm::Value *isTrue(llvm::Value *I32Result) {
    return B.CreateICmpNE(I32Result, ConstantInt::get(I32, 0));
  }
  llvm::Value *loadField(llvm::Value *Obj, size_t Offset, Type *Ty,
                         const Twine &Name);
  llvm::Value *loadType(llvm::Value *Obj, const Twine &Name);
  /// A pointer-sized load at a negative offset (the object pre-header).
  llvm::Value *loadPreHeader(llvm::Value *Obj, int64_t Offset,
                             const Twine &Name);
  llvm::Value *emitGenericDict(llvm::Value *Obj, const std::string &Name);

  void emitValue(ValueId Id, LoweringStats &Stats);
  void emitInlineSequenceItem(ValueId Id, bool IsTuple);
  std::pair<BasicBlock *, BasicBlock *>
  emitMemoTest(Constant *Slot, llvm::Value *Dict, const std::string &Name);
  llvm::Value *emitMemoRead(ValueId Id, llvm::Value *Dict, StringRef Fill,
                            Type *ArgTy, llvm::Value *Arg,
                            const std::string &Name);
  void emitGuard(size_t Index, LoweringStats &Stats);
  void emitShapeGuard(size_t Index);
  llvm::Value *emitShapeNode(const ShapeExpr &E, size_t I,
                             const std::vector<ShapeType> &Types,
                             const std::vector<llvm::Value *> &Reads,
                             BasicBlock *Unknown, const std::string &P);
  llvm::Value *emitShapeBinary(ShapeOp Op, llvm::Value *A, ShapeType TA,
                               llvm::Value *B, ShapeType TB,
                               BasicBlock *Unknown, const std::string &P);
  /// Branches to `Target` when `Cond` holds, else continues in a new block.
  void branchIf(llvm::Value *Cond, BasicBlock *Target, const Twine &Name);
  void emitRelease(llvm::Value *Obj);

  const BoundGuardSet *BS;
  const GuardSet &S;
  Module &M;
  LLVMContext &Ctx;
  IRBuilder<> B;
  PointerType *PtrTy;
  IntegerType *I32, *I64;
  MDNode *Likely;

  Function *F = nullptr;
  llvm::Value *FrameLocals = nullptr;
  llvm::Value *LocalStatePtr = nullptr;
  std::vector<llvm::Value *> Vals;
  /// Where a failure goes now: the cleanup block of the newest new reference.
  BasicBlock *FailTarget = nullptr;
  /// New references in acquisition order.
  std::vector<std::pair<ValueId, llvm::Value *>> NewRefs;
  std::vector<BasicBlock *> ReleaseBlocks;
  BasicBlock *CommonFail = nullptr;
  llvm::Value *PendingOk = nullptr;
};

} // namespace

std::string Lowerer::describe(size_t GuardIndex) const {
  const Guard &G = S.guards()[GuardIndex];
  return formatv("guard {0} ({1} on {2})", GuardIndex, spelling(G.Kind),
                 G.Attrs.Source.empty() ? "<no source>" : G.Attrs.Source)
      .str();
}

Error Lowerer::validate() const {
  const auto &Values = S.values();
  if (Values.empty() || Values[0].Kind != AccessorKind::Root)
    return createStringError("guard set '%s': value 0 must be the root",
                             S.name().c_str());
  size_t NumObjects = S.objects().size();
  for (ValueId I = 1; I < Values.size(); ++I) {
    const guardjit::Value &V = Values[I];
    if (V.Kind == AccessorKind::Root || V.Parent >= I)
      return createStringError(
          "guard set '%s': value %u (%s) must have an earlier parent",
          S.name().c_str(), I, V.Source.c_str());
    if (accessorReadsKey(V.Kind) && V.Key >= NumObjects)
      return createStringError("guard set '%s': value %u (%s) has no key",
                               S.name().c_str(), I, V.Source.c_str());
  }
  for (size_t I = 0; I < S.guards().size(); ++I) {
    const Guard &G = S.guards()[I];
    int Arity = guardArity(G.Kind);
    if (Arity != 0 && G.Operands.empty())
      return createStringError("%s needs an operand", describe(I).c_str());
    if (Arity > 0 && G.Operands.size() != static_cast<size_t>(Arity))
      return createStringError("%s needs exactly %d operand(s)",
                               describe(I).c_str(), Arity);
    for (ValueId Op : G.Operands)
      if (Op >= Values.size())
        return createStringError("%s: operand %u is not a value",
                                 describe(I).c_str(), Op);
    if (guardReadsObject(G.Kind) && G.Object >= NumObjects)
      return createStringError("%s: object %u is not in the object table",
                               describe(I).c_str(), G.Object);
    if (G.Kind == GuardKind::ShapeExpr) {
      std::vector<ShapeType> Types;
      std::string Msg = inferShapeExprTypes(G.Expr, G.Operands.size(), Types);
      if (!Msg.empty())
        return createStringError("%s: %s", describe(I).c_str(), Msg.c_str());
      if (G.Object != InvalidId && G.Object >= NumObjects)
        return createStringError("%s: object %u is not in the object table",
                                 describe(I).c_str(), G.Object);
    }
    if ((G.Kind == GuardKind::DefaultDevice ||
         G.Kind == GuardKind::FakeScriptTypeMatch) &&
        G.Aux >= NumObjects)
      return createStringError("%s: aux object %u is not in the object table",
                               describe(I).c_str(), G.Aux);
    if (G.Kind == GuardKind::RangeIteratorMatch && G.Ints.size() != 3)
      return createStringError("%s needs ints=[start, stop, step]",
                               describe(I).c_str());
    if (G.Kind == GuardKind::StorageOverlapping &&
        (G.Int < 0 || static_cast<uint64_t>(G.Int) > G.Operands.size()))
      return createStringError("%s: int must count the overlapping operands",
                               describe(I).c_str());
  }
  return Error::success();
}

FunctionCallee Lowerer::helper(StringRef Name, Type *Ret,
                               ArrayRef<Type *> Params) {
  FunctionCallee C =
      M.getOrInsertFunction(Name, FunctionType::get(Ret, Params, false));
  // The helpers are C functions that report failure by their result; telling
  // LLVM they never unwind keeps calls plain (no landing pads, no EH tables).
  if (auto *Fn = dyn_cast<Function>(C.getCallee()))
    Fn->setDoesNotThrow();
  return C;
}

Constant *Lowerer::pointer(const void *Address) {
  if (!BS) {
    // Symbolic lowering: CPython's statics by their C names, so that emitted
    // text does not depend on where libpython was loaded.
    static const std::pair<const void *, const char *> Statics[] = {
        {Py_None, "_Py_NoneStruct"},
        {Py_True, "_Py_TrueStruct"},
        {Py_False, "_Py_FalseStruct"},
        {&PyDict_Type, "PyDict_Type"},
    };
    for (const auto &[Addr, Name] : Statics)
      if (Addr == Address)
        return symbol(Name);
  }
  return ConstantExpr::getIntToPtr(
      ConstantInt::get(I64, reinterpret_cast<uintptr_t>(Address)), PtrTy);
}

void Lowerer::beginBlock(const Twine &Name) {
  BasicBlock *BB = BasicBlock::Create(Ctx, Name, F);
  if (PendingOk)
    B.CreateCondBr(PendingOk, BB, FailTarget, Likely);
  else
    B.CreateBr(BB);
  PendingOk = nullptr;
  B.SetInsertPoint(BB);
}

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
Lowerer::emitMemoTest(Constant *Slot, llvm::Value *Dict,
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

/// A memoized dict read: the slot's value on a hit, else `Fill` (the
/// helper that reads and refills the slot) with `Args` + the slot.
llvm::Value *Lowerer::emitMemoRead(ValueId Id, llvm::Value *Dict,
                                   StringRef Fill, Type *ArgTy,
                                   llvm::Value *Arg, const std::string &Name) {
  Constant *Slot = valueMemo(Id);
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

void Lowerer::emitValue(ValueId Id, LoweringStats &Stats) {
  const guardjit::Value &V = S.value(Id);
  if (V.Kind == AccessorKind::Globals) {
    // Captured at compile time: a constant, no read.
    Vals[Id] = object(V.Key);
    ++Stats.NumInlineReads;
    return;
  }
  std::string Name = prefix('v', Id);
  beginBlock(Name + "." + spelling(V.Kind));
  llvm::Value *Parent = Vals[V.Parent];
  llvm::Value *Result = nullptr;
  switch (V.Kind) {
  case AccessorKind::Root:
  case AccessorKind::Globals:
    llvm_unreachable("handled above");
  case AccessorKind::Type:
    assert(!accessorReturnsNewRef(V.Kind) && "inline type() is borrowed");
    Vals[Id] = loadType(Parent, Name);
    ++Stats.NumInlineReads;
    return;
  case AccessorKind::TupleGetItem:
  case AccessorKind::ListGetItem:
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
    Result = emitMemoRead(Id, Parent, "gj_rt_dict_get_item_fill", PtrTy,
                          object(V.Key), Name);
    break;
  case AccessorKind::GenericDict:
    Result = emitGenericDict(Parent, Name);
    break;
  case AccessorKind::GetAttr:
    Result = B.CreateCall(helper("gj_rt_getattr", PtrTy, {PtrTy, PtrTy}),
                          {Parent, object(V.Key)}, Name);
    break;
  case AccessorKind::GenericGetAttr:
    Result =
        B.CreateCall(helper("gj_rt_generic_getattr", PtrTy, {PtrTy, PtrTy}),
                     {Parent, object(V.Key)}, Name);
    break;
  case AccessorKind::Code:
    Result = B.CreateCall(helper("gj_rt_code", PtrTy, {PtrTy}), {Parent},
                          Name);
    break;
  case AccessorKind::GetItem:
    Result = B.CreateCall(helper("gj_rt_get_item", PtrTy, {PtrTy, PtrTy}),
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
                          I64, ConstantInt::get(I64, V.Index), Name);
    break;
  }
  Vals[Id] = Result;
  // A NULL read fails the set; the failure does not own the NULL.
  failUnless(B.CreateIsNotNull(Result, Name + ".ok"));
  if (accessorReturnsNewRef(V.Kind)) {
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

void Lowerer::emitRelease(llvm::Value *Obj) {
  B.CreateCall(helper("gj_rt_decref", B.getVoidTy(), {PtrTy}), {Obj});
}

void Lowerer::emitGuard(size_t Index, LoweringStats &Stats) {
  const Guard &G = S.guards()[Index];
  std::string P = prefix('g', Index);
  beginBlock(P + "." + spelling(G.Kind));
  llvm::Value *V = G.Operands.empty() ? nullptr : Vals[G.Operands.front()];
  auto Call = [&](StringRef Name, ArrayRef<Type *> Params,
                  ArrayRef<llvm::Value *> Args) {
    ++Stats.NumHelpers;
    return isTrue(B.CreateCall(helper(Name, I32, Params), Args, P + ".res"));
  };
  auto Inline = [&](llvm::Value *Ok) {
    ++Stats.NumInlined;
    return Ok;
  };
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
    BasicBlock *Slow = BasicBlock::Create(Ctx, P + ".compare", F);
    BasicBlock *Done = BasicBlock::Create(Ctx, P + ".done", F);
    B.CreateCondBr(B.CreateICmpEQ(V, object(G.Object), P + ".same"), Done,
                   Slow);
    B.SetInsertPoint(Slow);
    llvm::Value *Equal = Call("gj_rt_equals_match", {PtrTy, PtrTy},
                        {V, object(G.Object)});
    B.CreateCondBr(Equal, Done, FailTarget, Likely);
    B.SetInsertPoint(Done);
    return;
  }
  case GuardKind::LengthCheck:
    Ok = Call("gj_rt_length_check", {PtrTy, I64},
              {V, ConstantInt::get(I64, G.Int)});
    break;
  case GuardKind::DictLength:
    Ok = Call("gj_rt_dict_length", {PtrTy, I64},
              {V, ConstantInt::get(I64, G.Int)});
    break;
  case GuardKind::DictContains: {
    // A pass memo: a hit is a pass on this same dict state; a miss probes
    // (and records a pass after a pure probe).
    assert(guardUsesDictCache(G.Kind));
    Constant *Slot = guardMemo(Index);
    auto [Hit, Miss] = emitMemoTest(Slot, V, P);
    BasicBlock *Done = BasicBlock::Create(Ctx, P + ".done", F);
    B.SetInsertPoint(Hit);
    B.CreateBr(Done);
    B.SetInsertPoint(Miss);
    llvm::Value *Pass = Call(
        "gj_rt_dict_contains_fill", {PtrTy, PtrTy, I32, PtrTy},
        {V, object(G.Object), ConstantInt::get(I32, G.Int != 0), Slot});
    B.CreateCondBr(Pass, Done, FailTarget, Likely);
    B.SetInsertPoint(Done);
    return;
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
  case GuardKind::TensorMatch:
    Ok = Call("gj_rt_tensor_match", {PtrTy, PtrTy, PtrTy},
              {V, payload(Index), LocalStatePtr});
    break;
  case GuardKind::DimensionMarking:
    Ok = Call("gj_rt_dimension_marking", {PtrTy, PtrTy}, {V, payload(Index)});
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
  case GuardKind::DispatchKeySetMatch:
    Ok = Call("gj_rt_dispatch_key_set_match", {PtrTy, PtrTy, I64, PtrTy},
              {V, object(G.Object), ConstantInt::get(I64, G.Int),
               LocalStatePtr});
    break;
  case GuardKind::DualLevelMatch:
    Ok = Call("gj_rt_dual_level_match", {PtrTy, I64},
              {object(G.Object), ConstantInt::get(I64, G.Int)});
    break;
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
  case GuardKind::Lambda:
    Ok = Call("gj_rt_lambda", {PtrTy, PtrTy}, {object(G.Object), V});
    break;
  case GuardKind::EpilogueLambda:
    Ok = Call("gj_rt_lambda", {PtrTy, PtrTy}, {object(G.Object), FrameLocals});
    break;
  case GuardKind::ShapeExpr:
    ++Stats.NumInlined;
    emitShapeGuard(Index);
    return;
  }
  failUnless(Ok);
}

void Lowerer::branchIf(llvm::Value *Cond, BasicBlock *Target,
                       const Twine &Name) {
  BasicBlock *Next = BasicBlock::Create(Ctx, Name, F);
  // Targets are the rare outcomes (raise, overflow): weight them unlikely.
  B.CreateCondBr(Cond, Target, Next,
                 MDBuilder(Ctx).createBranchWeights(1, 2000));
  B.SetInsertPoint(Next);
}

/// A SHAPE_ENV expression (lib/Runtime/ShapeEval.cpp is the reference):
/// every operand is read first (a non-exact read is "unknown"), then the
/// nodes are computed in Python's order. A ZeroDivisionError branches to the
/// failure target; an overflow or inexact conversion to the "unknown" block,
/// which calls the Python fallback (or fails without one).
void Lowerer::emitShapeGuard(size_t Index) {
  const Guard &G = S.guards()[Index];
  std::string P = prefix('g', Index);
  std::vector<ShapeType> Types;
  std::string Msg = inferShapeExprTypes(G.Expr, G.Operands.size(), Types);
  assert(Msg.empty() && "validated before lowering");
  (void)Msg;
  // Inserted once their predecessors exist: the hot path reads in order.
  BasicBlock *Unknown = BasicBlock::Create(Ctx, P + ".unknown");
  BasicBlock *Cont = BasicBlock::Create(Ctx, P + ".done");

  // 1. Operand reads, each into an entry-block slot.
  std::vector<llvm::Value *> Reads(G.Operands.size(), nullptr);
  IRBuilder<> EB(&F->getEntryBlock(), F->getEntryBlock().begin());
  for (const ShapeNode &N : G.Expr) {
    if ((N.Op != ShapeOp::ReadInt && N.Op != ShapeOp::ReadFloat) ||
        Reads[N.Int])
      continue;
    bool IsInt = N.Op == ShapeOp::ReadInt;
    Type *Ty = IsInt ? static_cast<Type *>(I64) : B.getDoubleTy();
    std::string Slot = P + ".op" + std::to_string(N.Int);
    llvm::Value *Addr = EB.CreateAlloca(Ty, nullptr, Slot + ".slot");
    llvm::Value *Ok = isTrue(B.CreateCall(
        helper(IsInt ? "gj_rt_shape_read_int" : "gj_rt_shape_read_float", I32,
               {PtrTy, PtrTy}),
        {Vals[G.Operands[N.Int]], Addr}, Slot + ".ok"));
    branchIf(B.CreateNot(Ok), Unknown, Slot + ".read");
    Reads[N.Int] = B.CreateAlignedLoad(Ty, Addr, Align(8), Slot);
  }

  // 2. The expression; its root decides.
  llvm::Value *Root =
      emitShapeNode(G.Expr, G.Expr.size() - 1, Types, Reads, Unknown, P);
  B.CreateCondBr(Root, Cont, FailTarget, Likely);

  // 3. Unknown: Python decides (its answer is Dynamo's), or the guard fails.
  Unknown->insertInto(F);
  B.SetInsertPoint(Unknown);
  if (G.Object != InvalidId) {
    llvm::Value *Pass =
        isTrue(B.CreateCall(helper("gj_rt_lambda", I32, {PtrTy, PtrTy}),
                            {object(G.Object), FrameLocals}, P + ".fallback"));
    B.CreateCondBr(Pass, Cont, FailTarget);
  } else {
    B.CreateBr(FailTarget);
  }
  Cont->insertInto(F);
  B.SetInsertPoint(Cont);
}

llvm::Value *Lowerer::emitShapeNode(const ShapeExpr &E, size_t I,
                                    const std::vector<ShapeType> &Types,
                                    const std::vector<llvm::Value *> &Reads,
                                    BasicBlock *Unknown, const std::string &P) {
  const ShapeNode &N = E[I];
  auto Arg = [&](size_t K) {
    return emitShapeNode(E, N.Args[K], Types, Reads, Unknown, P);
  };
  switch (N.Op) {
  case ShapeOp::ConstInt:
    return ConstantInt::get(I64, N.Int);
  case ShapeOp::ConstFloat:
    return ConstantFP::get(B.getDoubleTy(), N.Float);
  case ShapeOp::ReadInt:
  case ShapeOp::ReadFloat:
    return Reads[N.Int];
  case ShapeOp::And:
  case ShapeOp::Or: {
    // Short-circuit like Python: later arguments run only when needed.
    bool IsAnd = N.Op == ShapeOp::And;
    BasicBlock *Join = BasicBlock::Create(Ctx, P + ".join", F);
    std::vector<std::pair<llvm::Value *, BasicBlock *>> Incoming;
    for (size_t K = 0; K < N.Args.size(); ++K) {
      llvm::Value *X = Arg(K);
      Incoming.emplace_back(X, B.GetInsertBlock());
      if (K + 1 == N.Args.size()) {
        B.CreateBr(Join);
        break;
      }
      BasicBlock *Next = BasicBlock::Create(Ctx, P + ".next", F);
      if (IsAnd)
        B.CreateCondBr(X, Next, Join);
      else
        B.CreateCondBr(X, Join, Next);
      B.SetInsertPoint(Next);
    }
    B.SetInsertPoint(Join);
    PHINode *Phi = B.CreatePHI(B.getInt1Ty(), Incoming.size());
    for (auto &[X, BB] : Incoming)
      Phi->addIncoming(X, BB);
    return Phi;
  }
  case ShapeOp::Min:
  case ShapeOp::Max: {
    // builtins.min/max: replace the running value when x < m (x > m).
    bool IsInt = Types[I] == ShapeType::Int, IsMin = N.Op == ShapeOp::Min;
    llvm::Value *M = Arg(0);
    for (size_t K = 1; K < N.Args.size(); ++K) {
      llvm::Value *X = Arg(K);
      llvm::Value *Replace =
          IsInt ? B.CreateICmp(IsMin ? CmpInst::ICMP_SLT : CmpInst::ICMP_SGT,
                               X, M)
                : B.CreateFCmp(IsMin ? CmpInst::FCMP_OLT : CmpInst::FCMP_OGT,
                               X, M);
      M = B.CreateSelect(Replace, X, M);
    }
    return M;
  }
  default:
    break;
  }
  llvm::Value *A = Arg(0);
  ShapeType TA = Types[N.Args[0]];
  llvm::Value *Bv = nullptr;
  ShapeType TB = ShapeType::Int;
  if (N.Args.size() > 1) {
    Bv = Arg(1);
    TB = Types[N.Args[1]];
  }
  return emitShapeBinary(N.Op, A, TA, Bv, TB, Unknown, P);
}

llvm::Value *Lowerer::emitShapeBinary(ShapeOp Op, llvm::Value *A, ShapeType TA,
                                      llvm::Value *Bv, ShapeType TB,
                                      BasicBlock *Unknown,
                                      const std::string &P) {
  Type *F64 = B.getDoubleTy();
  bool BothInt = TA == ShapeType::Int && TB == ShapeType::Int;
  auto AsF = [&](llvm::Value *X, ShapeType T) {
    return T == ShapeType::Int ? B.CreateSIToFP(X, F64) : X;
  };
  // |X| <= 2^53, i.e. (X + 2^53) <=u 2^54: X converts to double exactly.
  auto ExactOrUnknown = [&](llvm::Value *X) {
    llvm::Value *Biased = B.CreateAdd(X, ConstantInt::get(I64, MaxExactDoubleInt));
    branchIf(B.CreateICmpUGT(Biased,
                             ConstantInt::get(I64, 2 * MaxExactDoubleInt)),
             Unknown, P + ".exact");
  };
  auto Checked = [&](Intrinsic::ID Id, llvm::Value *X, llvm::Value *Y) {
    llvm::Value *R = B.CreateBinaryIntrinsic(Id, X, Y);
    branchIf(B.CreateExtractValue(R, 1), Unknown, P + ".no_overflow");
    return B.CreateExtractValue(R, 0);
  };
  llvm::Value *Zero = ConstantInt::get(I64, 0);
  switch (Op) {
  case ShapeOp::Add:
  case ShapeOp::Sub:
  case ShapeOp::Mul:
    if (BothInt)
      return Checked(Op == ShapeOp::Add   ? Intrinsic::sadd_with_overflow
                     : Op == ShapeOp::Sub ? Intrinsic::ssub_with_overflow
                                          : Intrinsic::smul_with_overflow,
                     A, Bv);
    A = AsF(A, TA);
    Bv = AsF(Bv, TB);
    return Op == ShapeOp::Add   ? B.CreateFAdd(A, Bv)
           : Op == ShapeOp::Sub ? B.CreateFSub(A, Bv)
                                : B.CreateFMul(A, Bv);
  case ShapeOp::FloorDiv:
  case ShapeOp::Mod: {
    // ZeroDivisionError: the guard fails.
    branchIf(B.CreateICmpEQ(Bv, Zero), FailTarget, P + ".nonzero");
    llvm::Value *MinusOne = B.CreateICmpEQ(Bv, ConstantInt::get(I64, -1));
    if (Op == ShapeOp::FloorDiv) {
      llvm::Value *IsMin = B.CreateICmpEQ(
          A, ConstantInt::get(I64, std::numeric_limits<int64_t>::min()));
      branchIf(B.CreateAnd(IsMin, MinusOne), Unknown, P + ".fits");
      llvm::Value *Q = B.CreateSDiv(A, Bv), *R = B.CreateSRem(A, Bv);
      llvm::Value *Adjust =
          B.CreateAnd(B.CreateICmpNE(R, Zero),
                      B.CreateICmpSLT(B.CreateXor(R, Bv), Zero));
      return B.CreateSub(Q, B.CreateZExt(Adjust, I64));
    }
    // x % -1 is 0 in Python but traps as srem INT64_MIN, -1: use 1.
    llvm::Value *Div = B.CreateSelect(MinusOne, ConstantInt::get(I64, 1), Bv);
    llvm::Value *R = B.CreateSRem(A, Div);
    llvm::Value *Adjust = B.CreateAnd(B.CreateICmpNE(R, Zero),
                                      B.CreateICmpSLT(B.CreateXor(R, Bv), Zero));
    return B.CreateSelect(Adjust, B.CreateAdd(R, Bv), R);
  }
  case ShapeOp::TrueDiv:
    if (BothInt) {
      branchIf(B.CreateICmpEQ(Bv, Zero), FailTarget, P + ".nonzero");
      ExactOrUnknown(A);
      ExactOrUnknown(Bv);
    }
    A = AsF(A, TA);
    Bv = AsF(Bv, TB);
    if (!BothInt)
      branchIf(B.CreateFCmpOEQ(Bv, ConstantFP::get(F64, 0.0)), FailTarget,
               P + ".nonzero");
    return B.CreateFDiv(A, Bv);
  case ShapeOp::Neg:
    if (TA == ShapeType::Float)
      return B.CreateFNeg(A);
    return Checked(Intrinsic::ssub_with_overflow, Zero, A);
  case ShapeOp::Abs:
    if (TA == ShapeType::Float)
      return B.CreateUnaryIntrinsic(Intrinsic::fabs, A);
    branchIf(B.CreateICmpEQ(A, ConstantInt::get(
                                   I64, std::numeric_limits<int64_t>::min())),
             Unknown, P + ".abs");
    return B.CreateSelect(B.CreateICmpSLT(A, Zero), B.CreateNeg(A), A);
  case ShapeOp::ToFloat:
    return B.CreateSIToFP(A, F64);
  case ShapeOp::Eq:
  case ShapeOp::Ne:
  case ShapeOp::Lt:
  case ShapeOp::Le:
  case ShapeOp::Gt:
  case ShapeOp::Ge: {
    static constexpr std::tuple<ShapeOp, CmpInst::Predicate, CmpInst::Predicate>
        Preds[] = {
            {ShapeOp::Eq, CmpInst::ICMP_EQ, CmpInst::FCMP_OEQ},
            {ShapeOp::Ne, CmpInst::ICMP_NE, CmpInst::FCMP_UNE},
            {ShapeOp::Lt, CmpInst::ICMP_SLT, CmpInst::FCMP_OLT},
            {ShapeOp::Le, CmpInst::ICMP_SLE, CmpInst::FCMP_OLE},
            {ShapeOp::Gt, CmpInst::ICMP_SGT, CmpInst::FCMP_OGT},
            {ShapeOp::Ge, CmpInst::ICMP_SGE, CmpInst::FCMP_OGE},
        };
    CmpInst::Predicate IP = CmpInst::ICMP_EQ, FP = CmpInst::FCMP_OEQ;
    for (const auto &[O, I, Fl] : Preds)
      if (O == Op)
        IP = I, FP = Fl;
    if (BothInt)
      return B.CreateICmp(IP, A, Bv);
    // Python compares int and float exactly; doubles do up to 2^53.
    if (TA == ShapeType::Int)
      ExactOrUnknown(A);
    if (TB == ShapeType::Int)
      ExactOrUnknown(Bv);
    return B.CreateFCmp(FP, AsF(A, TA), AsF(Bv, TB));
  }
  case ShapeOp::Not:
    return B.CreateNot(A);
  case ShapeOp::IsNan:
    return B.CreateFCmpUNO(A, A);
  default:
    llvm_unreachable("leaves and n-ary operators are emitted by emitShapeNode");
  }
}

Expected<Function *> Lowerer::run(StringRef Name, LoweringStats &Stats) {
  // 1. Reject malformed IR before creating anything.
  if (Error E = validate())
    return E;
  if (M.getNamedValue(Name))
    return createStringError("symbol '%s' already exists in the module",
                             Name.str().c_str());

  // 2. The function and its frame.
  F = Function::Create(FunctionType::get(I32, {PtrTy}, false),
                       GlobalValue::ExternalLinkage, Name, M);
  F->setDoesNotThrow();
  FrameLocals = F->getArg(0);
  FrameLocals->setName("frame_locals");
  BasicBlock *Entry = BasicBlock::Create(Ctx, "entry", F);
  B.SetInsertPoint(Entry);
  CommonFail = BasicBlock::Create(Ctx, "fail");
  IRBuilder<>(CommonFail).CreateRet(ConstantInt::get(I32, 0));
  FailTarget = CommonFail;

  const auto &Guards = S.guards();
  bool UsesLocalState =
      needsLocalState() ||
      std::any_of(Guards.begin(), Guards.end(), [](const Guard &G) {
        return guardNeedsLocalState(G.Kind);
      });
  if (UsesLocalState) {
    LocalStatePtr = B.CreateAlloca(ArrayType::get(I64, 2), nullptr,
                                   "local_state");
    // Read once per check, as the interpreter does; otherwise the hooks see
    // the empty state the interpreter passes.
    if (needsLocalState())
      B.CreateCall(helper("gj_rt_read_local_state", B.getVoidTy(), {PtrTy}),
                   {LocalStatePtr});
    else
      B.CreateAlignedStore(ConstantAggregateZero::get(ArrayType::get(I64, 2)),
                           LocalStatePtr, Align(8));
  }

  // 3. Schedule each guard right after its last operand.
  size_t NumValues = S.values().size();
  std::vector<std::vector<size_t>> After(NumValues);
  // Shape guards are Dynamo's SHAPE_ENV epilogue: after every value and
  // guard, before the epilogue lambdas (as in the interpreter).
  std::vector<size_t> Ambient, Epilogue, Shape;
  for (size_t I = 0; I < Guards.size(); ++I) {
    const Guard &G = Guards[I];
    if (G.Kind == GuardKind::EpilogueLambda)
      Epilogue.push_back(I);
    else if (G.Kind == GuardKind::ShapeExpr)
      Shape.push_back(I);
    else if (G.Operands.empty())
      Ambient.push_back(I);
    else
      After[*std::max_element(G.Operands.begin(), G.Operands.end())]
          .push_back(I);
  }

  // 4. Emit: ambient guards, values with their guards, epilogue.
  Vals.assign(NumValues, nullptr);
  Vals[0] = FrameLocals;
  Stats = LoweringStats();
  Stats.NumGuards = Guards.size();
  for (size_t I : Ambient)
    emitGuard(I, Stats);
  for (ValueId Id = 0; Id < NumValues; ++Id) {
    if (Id != 0)
      emitValue(Id, Stats);
    for (size_t I : After[Id])
      emitGuard(I, Stats);
  }
  for (size_t I : Shape)
    emitGuard(I, Stats);
  for (size_t I : Epilogue)
    emitGuard(I, Stats);

  // 5. Success releases every new reference, newest first.
  beginBlock("pass");
  for (auto It = NewRefs.rbegin(); It != NewRefs.rend(); ++It)
    emitRelease(It->second);
  B.CreateRet(ConstantInt::get(I32, 1));

  // The cleanup chain goes last, newest reference first, so the hot path is
  // laid out straight and each release block falls into the older one.
  for (auto It = ReleaseBlocks.rbegin(); It != ReleaseBlocks.rend(); ++It)
    (*It)->moveAfter(&F->back());
  CommonFail->insertInto(F);
  return F;
}

Expected<Function *> lowerGuardSet(const BoundGuardSet &Set, Module &M,
                                   StringRef Name, LoweringStats *Stats) {
  LoweringStats Local;
  Lowerer L(Set.set(), &Set, M);
  return L.run(Name, Stats ? *Stats : Local);
}

Expected<Function *> lowerGuardSetSymbolic(const GuardSet &Set, Module &M,
                                           StringRef Name,
                                           LoweringStats *Stats) {
  LoweringStats Local;
  Lowerer L(Set, nullptr, M);
  return L.run(Name, Stats ? *Stats : Local);
}

ArrayRef<RuntimeSymbol> runtimeSymbols() {
#define GJ_SYM(Fn) {#Fn, reinterpret_cast<void *>(&Fn)}
  static const RuntimeSymbol Symbols[] = {
      GJ_SYM(gj_rt_dict_get_item),
      GJ_SYM(gj_rt_dict_get_item_cached),
      GJ_SYM(gj_rt_dict_get_item_fill),
      GJ_SYM(gj_rt_generic_dict),
      GJ_SYM(gj_rt_getattr),
      GJ_SYM(gj_rt_generic_getattr),
      GJ_SYM(gj_rt_code),
      GJ_SYM(gj_rt_type),
      GJ_SYM(gj_rt_tuple_get_item),
      GJ_SYM(gj_rt_list_get_item),
      GJ_SYM(gj_rt_get_item),
      GJ_SYM(gj_rt_dict_key),
      GJ_SYM(gj_rt_dict_value),
      GJ_SYM(gj_rt_dict_key_fill),
      GJ_SYM(gj_rt_dict_value_fill),
      GJ_SYM(gj_rt_dict_contains_fill),
      GJ_SYM(gj_rt_closure),
      GJ_SYM(gj_rt_func_defaults),
      GJ_SYM(gj_rt_func_kwdefaults),
      GJ_SYM(gj_rt_type_dict),
      GJ_SYM(gj_rt_type_mro),
      GJ_SYM(gj_rt_lambda_call),
      GJ_SYM(gj_rt_call_function_no_args),
      GJ_SYM(gj_rt_weakref_call),
      GJ_SYM(gj_rt_global_weakref),
      GJ_SYM(gj_rt_decref),
      GJ_SYM(gj_rt_float_is_nan),
      GJ_SYM(gj_rt_complex_is_nan),
      GJ_SYM(gj_rt_dict_version),
      GJ_SYM(gj_rt_equals_match),
      GJ_SYM(gj_rt_length_check),
      GJ_SYM(gj_rt_dict_length),
      GJ_SYM(gj_rt_dict_contains),
      GJ_SYM(gj_rt_no_hasattr),
      GJ_SYM(gj_rt_lambda),
      GJ_SYM(gj_rt_dimension_marking),
      GJ_SYM(gj_rt_default_device),
      GJ_SYM(gj_rt_no_aliasing),
      GJ_SYM(gj_rt_read_local_state),
      GJ_SYM(gj_rt_tensor_match),
      GJ_SYM(gj_rt_global_state),
      GJ_SYM(gj_rt_torch_function_mode_stack),
      GJ_SYM(gj_rt_grad),
      GJ_SYM(gj_rt_set_get_item),
      GJ_SYM(gj_rt_tuple_iterator_get_item),
      GJ_SYM(gj_rt_tuple_iterator_len),
      GJ_SYM(gj_rt_range_iterator_match),
      GJ_SYM(gj_rt_mapping_keys_match),
      GJ_SYM(gj_rt_fake_script_type_match),
      GJ_SYM(gj_rt_set_contains),
      GJ_SYM(gj_rt_dispatch_key_set_match),
      GJ_SYM(gj_rt_dual_level_match),
      GJ_SYM(gj_rt_storage_overlapping),
      GJ_SYM(gj_rt_shape_read_int),
      GJ_SYM(gj_rt_shape_read_float),
      GJ_SYM(gj_rt_tensor_property),
  };
#undef GJ_SYM
  return Symbols;
}

} // namespace guardjit
