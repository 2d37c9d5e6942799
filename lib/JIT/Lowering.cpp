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
// touched), then every OBJECT_ALIASING guard in one fused block, then the
// shape expressions, then epilogue lambdas over the frame locals.
//
// New references are released through a chain of cleanup blocks: a failure
// after the k-th new reference branches to "fail.release.vN" of that
// reference, which releases it and falls into the one before, ending in the
// common "fail" block. This keeps the function in SSA form with no allocas
// and no null tests on the failure path. The first tier
// (LoweringOptions::CallMemo) trades that for less code: its new references
// go into a frame array with their count, released by one call on success
// and by one "fail.release" block on every failure after the first.
//
// Split into chunks (LoweringOptions::ChunkSteps): the same steps in the
// same order, cut into internal functions "<name>.cK" of about ChunkSteps
// value reads and guards each; the entry function `<name>` calls them in
// order and returns 0 at the first that fails. Code generation above O0
// costs time super-linear in a function's size (the greedy register
// allocator's spill placement and interference, machine CSE, the x86
// execution-domain fix), so bounded functions keep the background tier's
// compile linear in the guards. What crosses a boundary goes through the
// entry's frame: a value used by a later chunk is stored to its slot of a
// frame array right after its definition and loaded once by each chunk
// that uses it; the local state is the entry's; every new reference goes
// into the entry's reference array (RefsInArray), which the entry releases
// when the check ends, passing or failing.
//
//===----------------------------------------------------------------------===//
#include "guardjit/JIT/Lowering.h"

#include "Lowerer.h"

#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/CPythonABI.h"
#include "guardjit/Runtime/RuntimeHelpers.h"
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

// The generated code reads DictReadCache slots as {ptr, i64, ptr}; the
// first tier passes the address of the ReadDescriptor around one.
static_assert(sizeof(DictReadCache) == 24 &&
                  offsetof(DictReadCache, Dict) == 0 &&
                  offsetof(DictReadCache, Tag) == 8 &&
                  offsetof(DictReadCache, Value) == 16,
              "DictReadCache is lowered as {ptr, i64, ptr}");
static_assert(offsetof(ReadDescriptor, Memo) == 0,
              "a ReadDescriptor's address is its memo slot's");

Lowerer::Lowerer(const GuardSet &S, const BoundGuardSet *BS, Module &M,
                 LoweringOptions Options, std::vector<TableSlot> *Table)
    : BS(BS), Table(Table), S(S), Compact(Options.Compact || Options.CallMemo),
      CallMemo(Options.CallMemo), M(M), Ctx(M.getContext()), B(Ctx),
      PtrTy(PointerType::getUnqual(Ctx)), I32(Type::getInt32Ty(Ctx)),
      I64(Type::getInt64Ty(Ctx)),
      Likely(MDBuilder(Ctx).createLikelyBranchWeights()),
      ChunkSteps(Options.ChunkSteps) {}

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
    if (V.Kind == AccessorKind::ContextVarGet && V.Key != InvalidId &&
        V.Key >= NumObjects)
      return createStringError(
          "guard set '%s': value %u (%s): default %u is not in the object "
          "table",
          S.name().c_str(), I, V.Source.c_str(), V.Key);
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
    if (guardAuxRule(G.Kind).U == ObjectUse::Required && G.Aux >= NumObjects)
      return createStringError("%s: aux object %u is not in the object table",
                               describe(I).c_str(), G.Aux);
    if (G.Kind == GuardKind::RangeIteratorMatch && G.Ints.size() != 3)
      return createStringError("%s needs ints=[start, stop, step]",
                               describe(I).c_str());
    if (G.Kind == GuardKind::SavedTensorsHooks &&
        G.Ints.size() != (G.Int ? 2u : 0u))
      return createStringError("%s needs ints=[pack id, unpack id] iff int=1",
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
    // Symbolic and relocatable lowering: CPython's statics by their C names,
    // so that the code does not depend on where libpython was loaded.
    for (const RuntimeSymbol &Static : cpythonStatics())
      if (Static.Address == Address)
        return Table ? absoluteSymbol(Static.Name) : symbol(Static.Name);
    assert(!Table && "relocatable code must not embed an address");
  }
  return ConstantExpr::getIntToPtr(
      ConstantInt::get(I64, reinterpret_cast<uintptr_t>(Address)), PtrTy);
}

std::string Lowerer::symbolicName(TableSlot::SlotKind K, uint32_t Index) {
  switch (K) {
  case TableSlot::Object:
    return "gj.obj." + std::to_string(Index);
  case TableSlot::Payload:
    return "gj.payload.g" + std::to_string(Index);
  case TableSlot::ValueMemo:
    return "gj.memo.v" + std::to_string(Index);
  case TableSlot::GuardMemo:
    return "gj.memo.g" + std::to_string(Index);
  case TableSlot::Recorded:
    return "gj.recorded";
  case TableSlot::Memos:
    return "gj.memos";
  }
  return "gj.unknown";
}

llvm::Value *Lowerer::tableSlot(TableSlot::SlotKind K, uint32_t Index) {
  auto [It, New] =
      SlotOf.try_emplace((uint64_t(K) << 32) | Index, Table->size());
  if (New)
    Table->push_back({K, Index});
  return absoluteSymbol(RelocatableAddressPrefix + Twine(It->second));
}

llvm::Value *Lowerer::memoAddress(uint32_t Slot) {
  if (Slot == NoMemoSlot)
    return ConstantPointerNull::get(PtrTy);
  // Not inbounds: the symbol is declared as an i8.
  return ConstantExpr::getGetElementPtr(
      B.getInt8Ty(), cast<Constant>(tableSlot(TableSlot::Memos, 0)),
      ConstantInt::get(I64, uint64_t(Slot) * sizeof(ReadDescriptor)));
}

Constant *Lowerer::absoluteSymbol(const Twine &Name) {
  auto *GV = cast<GlobalVariable>(symbol(Name));
  // Nearly the code of an address baked in: the code generator materializes
  // the address as a 64-bit immediate (movabs, R_X86_64_64) that the linker
  // patches. `absolute_symbol` alone is not enough: x86 instruction
  // selection still folds a load from the symbol into a RIP-relative operand
  // (which cannot reach it); a global of the large code model is never
  // folded (FastISel levels: prepareRelocatableForFastISel). Measured: a GOT
  // or table load per address instead cost up to 2 ns per guard on memoized
  // dict reads.
  if (!GV->getMetadata(LLVMContext::MD_absolute_symbol)) {
    Metadata *FullRange[] = {
        ConstantAsMetadata::get(ConstantInt::get(I64, -1)),
        ConstantAsMetadata::get(ConstantInt::get(I64, -1))};
    GV->setMetadata(LLVMContext::MD_absolute_symbol,
                    MDNode::get(Ctx, FullRange));
    GV->setCodeModel(CodeModel::Large);
  }
  return GV;
}

void Lowerer::beginBlock(const Twine &Name) {
  if (!PendingOk)
    return;
  BasicBlock *BB = BasicBlock::Create(Ctx, Name, F);
  B.CreateCondBr(PendingOk, BB, FailTarget, Likely);
  PendingOk = nullptr;
  B.SetInsertPoint(BB);
}

void Lowerer::branchIf(llvm::Value *Cond, BasicBlock *Target,
                       const Twine &Name) {
  BasicBlock *Next = BasicBlock::Create(Ctx, Name, F);
  // Targets are the rare outcomes (raise, overflow): weight them unlikely.
  B.CreateCondBr(Cond, Target, Next,
                 MDBuilder(Ctx).createBranchWeights(1, 2000));
  B.SetInsertPoint(Next);
}

llvm::Value *Lowerer::callCheck(StringRef Fn, ArrayRef<Type *> Params,
                                ArrayRef<llvm::Value *> Args,
                                const std::string &P, LoweringStats &Stats) {
  ++Stats.NumHelpers;
  return isTrue(B.CreateCall(helper(Fn, I32, Params), Args, P + ".res"));
}

void Lowerer::emitGuard(size_t Index, LoweringStats &Stats) {
  const Guard &G = S.guards()[Index];
  localize(G.Operands);
  beginBlock(prefix('g', Index) + "." + spelling(G.Kind));
  if (G.Kind == GuardKind::ShapeExpr) {
    ++Stats.NumInlined;
    emitShapeGuard(Index);
    return;
  }
  llvm::Value *Ok = isTensorGuard(G.Kind) ? emitTensorGuard(Index, Stats)
                    : isRelationalGuard(G.Kind)
                        ? emitRelationalGuard(Index, Stats)
                        : emitLeafGuard(Index, Stats);
  if (Ok)
    failUnless(Ok);
}

void Lowerer::beginChunk() {
  // noinline: a pipeline with an inliner must not undo the split.
  Type *Params[] = {PtrTy, PtrTy, PtrTy, PtrTy, PtrTy};
  F = Function::Create(FunctionType::get(I32, Params, false),
                       GlobalValue::InternalLinkage,
                       Entry->getName() + ".c" + Twine(Chunks.size()), M);
  F->setDoesNotThrow();
  F->addFnAttr(Attribute::NoInline);
  Chunks.push_back(F);
  FrameLocals = F->getArg(0);
  ChunkSpill.push_back(F->getArg(1));
  LocalStatePtr = UsesLocalState ? F->getArg(2) : nullptr;
  RefArray = NumNewRefs ? F->getArg(3) : nullptr;
  RefCount = NumNewRefs ? F->getArg(4) : nullptr;
  if (!Ctx.shouldDiscardValueNames()) {
    FrameLocals->setName("frame_locals");
    F->getArg(1)->setName("spill");
    F->getArg(2)->setName("local_state");
    F->getArg(3)->setName("new_refs");
    F->getArg(4)->setName("new_refs.count");
  }
  Vals[0] = FrameLocals;
  B.SetInsertPoint(BasicBlock::Create(Ctx, "entry", F));
  CommonFail = BasicBlock::Create(Ctx, "fail");
  IRBuilder<>(CommonFail).CreateRet(ConstantInt::get(I32, 0));
  FailTarget = CommonFail;
  RefFail = nullptr;
  ReleaseBlocks.clear();
  PendingOk = nullptr;
  ChunkSize = 0;
}

void Lowerer::endChunk() {
  beginBlock("pass");
  B.CreateRet(ConstantInt::get(I32, 1));
  // New references are in the entry's array (RefsInArray): no cleanup chain.
  assert(ReleaseBlocks.empty() && "a split chunk releases nothing");
  CommonFail->insertInto(F);
}

void Lowerer::chunkStep(size_t Steps) {
  if (!Split)
    return;
  if (ChunkSize >= ChunkSteps) {
    endChunk();
    beginChunk();
  }
  ChunkSize += Steps;
}

void Lowerer::defined(ValueId Id) {
  if (!Split)
    return;
  DefVals[Id] = Vals[Id];
  DefChunk[Id] = ValChunk[Id] = static_cast<int32_t>(Chunks.size() - 1);
}

void Lowerer::localize(ValueId Id) {
  int32_t Here = static_cast<int32_t>(Chunks.size() - 1);
  // The root is each chunk's argument; a constant (a global's object, an
  // address) is valid in any function; a read of a run (CallMemo) has no
  // value, nothing reads it.
  if (!Split || Id == 0 || ValChunk[Id] == Here || !DefVals[Id] ||
      isa<Constant>(DefVals[Id]))
    return;
  auto *Def = cast<Instruction>(DefVals[Id]);
  if (SpillSlot[Id] < 0) {
    // The definition dominates the rest of its chunk, the only way that
    // chunk passes: store right after it (after the PHIs of its block).
    SpillSlot[Id] = static_cast<int32_t>(NumSpillSlots++);
    IRBuilder<> SB(Ctx);
    if (isa<PHINode>(Def))
      SB.SetInsertPoint(Def->getParent(),
                        Def->getParent()->getFirstInsertionPt());
    else
      SB.SetInsertPoint(Def->getNextNode());
    SB.CreateAlignedStore(
        Def,
        SB.CreateConstInBoundsGEP1_64(PtrTy, ChunkSpill[DefChunk[Id]],
                                      SpillSlot[Id]),
        Align(8));
  }
  auto *L = B.CreateAlignedLoad(
      PtrTy,
      B.CreateConstInBoundsGEP1_64(PtrTy, ChunkSpill.back(), SpillSlot[Id]),
      Align(8), prefix('v', Id) + ".reload");
  Vals[Id] = L;
  ValChunk[Id] = Here;
}

Expected<Function *> Lowerer::run(StringRef Name, LoweringStats &Stats) {
  // 1. Reject malformed IR before creating anything.
  if (Error E = validate())
    return E;
  // Relocatable: where bind puts each memo slot in the one array.
  if (Table)
    layoutMemos(S, &MemoOfValue, &MemoOfGuard);
  if (M.getNamedValue(Name))
    return createStringError("symbol '%s' already exists in the module",
                             Name.str().c_str());

  const auto &Guards = S.guards();
  size_t NumValues = S.values().size();
  UsesLocalState =
      needsLocalState() ||
      std::any_of(Guards.begin(), Guards.end(), [](const Guard &G) {
        return guardNeedsLocalState(G.Kind);
      });
  // Small sets stay one function: a chunk call would only add a call.
  Split = ChunkSteps != 0 && Guards.size() + NumValues > ChunkSteps;
  RefsInArray = CallMemo || Split;
  NumNewRefs = 0;
  for (ValueId Id = 1; Id < NumValues; ++Id)
    NumNewRefs += accessorReturnsNewRef(S.value(Id).Kind);

  // 2. The function and its frame (split: the entry's frame).
  Entry = Function::Create(FunctionType::get(I32, {PtrTy}, false),
                           GlobalValue::ExternalLinkage, Name, M);
  Entry->setDoesNotThrow();
  F = Entry;
  FrameLocals = F->getArg(0);
  FrameLocals->setName("frame_locals");
  BasicBlock *EntryBlock = BasicBlock::Create(Ctx, "entry", F);
  B.SetInsertPoint(EntryBlock);
  if (!Split) { // else each chunk's (beginChunk)
    CommonFail = BasicBlock::Create(Ctx, "fail");
    IRBuilder<>(CommonFail).CreateRet(ConstantInt::get(I32, 0));
    FailTarget = CommonFail;
  }

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
  // The frame array of every new reference: released when the check ends,
  // as the interpreter does.
  if (RefsInArray && NumNewRefs) {
    RefArray = B.CreateAlloca(ArrayType::get(PtrTy, NumNewRefs), nullptr,
                              "new_refs");
    RefCount = B.CreateAlloca(I64, nullptr, "new_refs.count");
    // Split: the entry releases the count after any chunk failed.
    if (Split)
      B.CreateAlignedStore(ConstantInt::get(I64, 0), RefCount, Align(8));
  }
  llvm::Value *EntryLocalState = LocalStatePtr;
  llvm::Value *EntryRefArray = RefArray, *EntryRefCount = RefCount;

  // 3. Schedule each guard right after its last operand.
  std::vector<std::vector<size_t>> After(NumValues);
  // Shape guards are Dynamo's SHAPE_ENV epilogue: after every value and
  // guard, before the epilogue lambdas (as in the interpreter).
  // Object-aliasing guards are fused into one block after every value.
  std::vector<size_t> Ambient, Aliasing, Epilogue, Shape;
  for (size_t I = 0; I < Guards.size(); ++I) {
    const Guard &G = Guards[I];
    if (G.Kind == GuardKind::EpilogueLambda)
      Epilogue.push_back(I);
    else if (G.Kind == GuardKind::ShapeExpr)
      Shape.push_back(I);
    else if (G.Kind == GuardKind::ObjectAliasing)
      Aliasing.push_back(I);
    else if (G.Operands.empty())
      Ambient.push_back(I);
    else
      After[*std::max_element(G.Operands.begin(), G.Operands.end())]
          .push_back(I);
  }

  // 4. Emit: ambient guards, values with their guards, aliasing, shapes,
  // epilogue. Split: a chunk boundary may come before any of these steps.
  Vals.assign(NumValues, nullptr);
  Vals[0] = FrameLocals;
  if (Split) {
    DefVals.assign(NumValues, nullptr);
    DefChunk.assign(NumValues, -1);
    ValChunk.assign(NumValues, -1);
    SpillSlot.assign(NumValues, -1);
    NumSpillSlots = 0;
    Chunks.clear();
    ChunkSpill.clear();
    beginChunk();
  }
  Stats = LoweringStats();
  Stats.NumGuards = Guards.size();
  for (size_t I : Ambient) {
    chunkStep(1);
    emitGuard(I, Stats);
  }
  // The first tier checks the simple guards right after a memoized read
  // inside the read's helper (ReadDescriptor): no code for them.
  // Runs of such reads of one parent that nothing reads afterwards (or
  // read only along a path), and runs of DICT_CONTAINS on one value, are
  // one call over their descriptors each (gj_rt_read_run,
  // gj_rt_dict_contains_run).
  if (CallMemo) {
    Fused = fusedReadGuards(S);
    // A step is a read path (readPaths: `obj.forward.__code__`, each read
    // the only child of the one before, down to a read nothing reads) or
    // such a read alone; consecutive steps from one parent are one run.
    std::vector<uint32_t> Paths = readPaths(S, Fused);
    ReadRun.assign(NumValues, 0);
    for (ValueId Id = 1; Id < NumValues;) {
      ValueId End = Id;
      while (End < NumValues && Paths[End] &&
             S.value(End).Parent == S.value(Id).Parent)
        End += Paths[End];
      if (End == Id) {
        ++Id;
        continue;
      }
      ReadRun[Id] = End - Id;
      Id = End;
    }
  }
  for (ValueId Id = 0; Id < NumValues; ++Id) {
    if (Id != 0 && CallMemo && ReadRun[Id] > 1) {
      size_t Steps = ReadRun[Id];
      for (ValueId K = Id; K < Id + ReadRun[Id]; ++K)
        Steps += After[K].size();
      chunkStep(Steps);
      localize(S.value(Id).Parent);
      emitReadRun(Id, ReadRun[Id], Stats);
      for (ValueId K = Id; K < Id + ReadRun[Id]; ++K)
        for ([[maybe_unused]] size_t I : After[K]) {
          assert(Fused[I] && "a read in a run has no guard left");
          ++Stats.NumHelpers;
        }
      Id += ReadRun[Id] - 1;
      continue;
    }
    const std::vector<size_t> &Here = After[Id];
    if (Id != 0) {
      chunkStep(1 + Here.size());
      localize(S.value(Id).Parent);
      emitValue(Id, Stats);
      defined(Id);
    }
    for (size_t J = 0; J < Here.size(); ++J) {
      size_t I = Here[J];
      if (CallMemo && Fused[I]) {
        ++Stats.NumHelpers;
        continue;
      }
      if (CallMemo && Guards[I].Kind == GuardKind::DictContains) {
        size_t E = J + 1;
        while (E < Here.size() &&
               Guards[Here[E]].Kind == GuardKind::DictContains)
          ++E;
        if (E - J > 1) {
          localize(Guards[I].Operands);
          emitDictContainsRun(ArrayRef<size_t>(Here).slice(J, E - J), Stats);
          J = E - 1;
          continue;
        }
      }
      emitGuard(I, Stats);
    }
  }
  if (!Aliasing.empty()) {
    chunkStep(Aliasing.size());
    for (size_t I : Aliasing)
      localize(Guards[I].Operands);
  }
  emitFusedAliasing(Aliasing, Stats);
  for (size_t I : Shape) {
    chunkStep(1);
    emitGuard(I, Stats);
  }
  for (size_t I : Epilogue) {
    chunkStep(1);
    emitGuard(I, Stats);
  }

  if (Split) {
    // 5. Split: the entry calls the chunks in order, then releases every
    // new reference, whatever the answer.
    endChunk();
    F = Entry;
    B.SetInsertPoint(EntryBlock);
    llvm::Value *Spill = ConstantPointerNull::get(PtrTy);
    if (NumSpillSlots)
      Spill = IRBuilder<>(EntryBlock, EntryBlock->begin())
                  .CreateAlloca(ArrayType::get(PtrTy, NumSpillSlots), nullptr,
                                "spill");
    llvm::Value *Null = ConstantPointerNull::get(PtrTy);
    llvm::Value *Args[] = {Entry->getArg(0), Spill,
                           EntryLocalState ? EntryLocalState : Null,
                           EntryRefArray ? EntryRefArray : Null,
                           EntryRefCount ? EntryRefCount : Null};
    BasicBlock *Fail = BasicBlock::Create(Ctx, "fail");
    for (size_t K = 0; K < Chunks.size(); ++K) {
      CallInst *Call = B.CreateCall(Chunks[K], Args, "c" + Twine(K));
      BasicBlock *Next = BasicBlock::Create(Ctx, "pass.c" + Twine(K), Entry);
      B.CreateCondBr(isTrue(Call), Next, Fail, Likely);
      B.SetInsertPoint(Next);
    }
    auto Release = [&](IRBuilder<> &RB) {
      if (EntryRefArray)
        RB.CreateCall(
            helper("gj_rt_decref_array", RB.getVoidTy(), {PtrTy, I64}),
            {EntryRefArray,
             RB.CreateAlignedLoad(I64, EntryRefCount, Align(8))});
    };
    Release(B);
    B.CreateRet(ConstantInt::get(I32, 1));
    Fail->insertInto(Entry);
    IRBuilder<> FB(Fail);
    Release(FB);
    FB.CreateRet(ConstantInt::get(I32, 0));
    return Entry;
  }

  // 5. Success releases every new reference, newest first.
  beginBlock("pass");
  if (CallMemo && !NewRefs.empty())
    B.CreateCall(helper("gj_rt_decref_array", B.getVoidTy(), {PtrTy, I64}),
                 {RefArray, ConstantInt::get(I64, NewRefs.size())});
  else
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
                                   StringRef Name, LoweringStats *Stats,
                                   LoweringOptions Options) {
  LoweringStats Local;
  Lowerer L(Set.set(), &Set, M, Options);
  return L.run(Name, Stats ? *Stats : Local);
}

Expected<Function *> lowerGuardSetSymbolic(const GuardSet &Set, Module &M,
                                           StringRef Name,
                                           LoweringStats *Stats,
                                           LoweringOptions Options) {
  LoweringStats Local;
  Lowerer L(Set, nullptr, M, Options);
  return L.run(Name, Stats ? *Stats : Local);
}

Expected<Function *> lowerGuardSetRelocatable(const GuardSet &Set, Module &M,
                                              StringRef Name,
                                              std::vector<TableSlot> &Table,
                                              LoweringStats *Stats,
                                              LoweringOptions Options) {
  LoweringStats Local;
  Table.clear();
  Lowerer L(Set, nullptr, M, Options, &Table);
  return L.run(Name, Stats ? *Stats : Local);
}

void prepareRelocatableForFastISel(Module &M) {
  const DataLayout &DL = M.getDataLayout();
  auto IsAddressSymbol = [](const llvm::Value *V) {
    auto *GV = dyn_cast<GlobalVariable>(V);
    return GV && GV->getMetadata(LLVMContext::MD_absolute_symbol);
  };
  for (GlobalVariable &GV : M.globals())
    if (IsAddressSymbol(&GV))
      GV.setCodeModel(CodeModel::Small);
  // Every use, not only loads and stores: the compact lowering also passes
  // slots to helper calls and selects between a slot and an object's field
  // (emitMemoHit), and a symbol's address taken RIP-relative would not
  // reach an absolute address (a Delta32 fixup out of range). A PHI's
  // incoming constant is frozen at the end of its incoming block.
  for (Function &F : M)
    for (BasicBlock &BB : F)
      for (Instruction &I : BB) {
        if (isa<FreezeInst>(I) || isa<GetElementPtrInst>(I))
          continue;
        for (unsigned Op = 0, E = I.getNumOperands(); Op < E; ++Op) {
          auto *C = dyn_cast<Constant>(I.getOperand(Op));
          if (!C || isa<Function>(C) || !C->getType()->isPointerTy())
            continue;
          APInt Offset(DL.getIndexTypeSizeInBits(C->getType()), 0);
          const llvm::Value *Base = C->stripAndAccumulateConstantOffsets(
              DL, Offset, /*AllowNonInbounds=*/true);
          if (!IsAddressSymbol(Base))
            continue;
          Instruction *At = &I;
          if (auto *Phi = dyn_cast<PHINode>(&I))
            At = Phi->getIncomingBlock(Op)->getTerminator();
          IRBuilder<> B(At);
          llvm::Value *Frozen =
              B.CreateFreeze(const_cast<llvm::Value *>(Base));
          I.setOperand(Op, Offset.isZero()
                               ? Frozen
                               : B.CreateConstGEP1_64(B.getInt8Ty(), Frozen,
                                                      Offset.getSExtValue()));
        }
      }
}

const void *tableSlotAddress(const BoundGuardSet &Set, TableSlot Slot,
                             bool *InRange) {
  const GuardSet &S = Set.set();
  bool Ok = false;
  const void *Address = nullptr;
  switch (Slot.Kind) {
  case TableSlot::Object:
    if ((Ok = Slot.Index < S.objects().size()))
      Address = Set.object(Slot.Index);
    break;
  case TableSlot::Payload:
    if ((Ok = Slot.Index < S.guards().size()))
      Address = Set.payload(Slot.Index);
    break;
  case TableSlot::ValueMemo:
    if ((Ok = Slot.Index < S.values().size()))
      Address = Set.readDescriptor(Slot.Index);
    break;
  case TableSlot::GuardMemo:
    if ((Ok = Slot.Index < S.guards().size()))
      Address = Set.guardCache(Slot.Index);
    break;
  case TableSlot::Recorded:
    if ((Ok = Slot.Index == 0))
      Address = Set.recordedSlots();
    break;
  case TableSlot::Memos:
    // The code adds offsets below numMemos() * sizeof(ReadDescriptor): the
    // lowering computes them from the IR as bind does, and the key covers
    // the IR. No memos, no slot.
    if ((Ok = Slot.Index == 0 && Set.numMemos() != 0))
      Address = Set.memos();
    break;
  }
  if (InRange)
    *InRange = Ok;
  return Address;
}

ArrayRef<RuntimeSymbol> cpythonStatics() {
  static const RuntimeSymbol Statics[] = {
      {"_Py_NoneStruct", Py_None},
      {"_Py_TrueStruct", Py_True},
      {"_Py_FalseStruct", Py_False},
      {"PyDict_Type", &PyDict_Type},
      {"PyModule_Type", &PyModule_Type},
      {"PyTuple_Type", &PyTuple_Type},
      {"PyList_Type", &PyList_Type},
  };
  return Statics;
}

ArrayRef<RuntimeSymbol> runtimeSymbols() {
#define GJ_SYM(Fn) {#Fn, reinterpret_cast<void *>(&Fn)}
  static const RuntimeSymbol Symbols[] = {
      GJ_SYM(gj_rt_dict_get_item),
      GJ_SYM(gj_rt_dict_get_item_fill),
      GJ_SYM(gj_rt_generic_dict),
      GJ_SYM(gj_rt_getattr),
      GJ_SYM(gj_rt_module_getattr_fill),
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
      GJ_SYM(gj_rt_getattr_cached),
      GJ_SYM(gj_rt_dict_get_item_desc),
      GJ_SYM(gj_rt_dict_key_desc),
      GJ_SYM(gj_rt_dict_value_desc),
      GJ_SYM(gj_rt_getattr_desc),
      GJ_SYM(gj_rt_dict_contains_desc),
      GJ_SYM(gj_rt_code_desc),
      GJ_SYM(gj_rt_get_item_desc),
      GJ_SYM(gj_rt_tuple_get_item_desc),
      GJ_SYM(gj_rt_list_get_item_desc),
      GJ_SYM(gj_rt_read_run),
      GJ_SYM(gj_rt_dict_contains_run),
      GJ_SYM(gj_rt_closure),
      GJ_SYM(gj_rt_func_defaults),
      GJ_SYM(gj_rt_func_kwdefaults),
      GJ_SYM(gj_rt_type_dict),
      GJ_SYM(gj_rt_type_mro),
      GJ_SYM(gj_rt_lambda_call),
      GJ_SYM(gj_rt_call_function_no_args),
      GJ_SYM(gj_rt_weakref_call),
      GJ_SYM(gj_rt_global_weakref),
      GJ_SYM(gj_rt_contextvar_get),
      GJ_SYM(gj_rt_decref),
      GJ_SYM(gj_rt_decref_array),
      GJ_SYM(gj_rt_float_is_nan),
      GJ_SYM(gj_rt_complex_is_nan),
      GJ_SYM(gj_rt_dict_version),
      GJ_SYM(gj_rt_equals_match),
      GJ_SYM(gj_rt_length_check),
      GJ_SYM(gj_rt_length_check_set_size),
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
      GJ_SYM(gj_rt_saved_tensors_hooks),
      GJ_SYM(gj_rt_cow_tensor_match),
      GJ_SYM(gj_rt_storage_overlapping),
      GJ_SYM(gj_rt_shape_read_int),
      GJ_SYM(gj_rt_shape_read_float),
      GJ_SYM(gj_rt_tensor_property),
  };
#undef GJ_SYM
  return Symbols;
}

} // namespace guardjit
