//===- Lowerer.h - State shared by the lowering files ----------*- C++ -*-===//
//
// Private to lib/JIT. One Lowerer lowers one guard set to one function (or
// an entry calling chunk functions, LoweringOptions::ChunkSteps); its
// code is split by concern:
//
//   Lowering.cpp         the driver: validation, scheduling, the frame, the
//                        guard dispatch, the public entry points, the
//                        runtime symbol table
//   LowerAccessors.cpp   value reads (accessors), the dict-read memo, loads
//   LowerLeafGuards.cpp  single-operand guards and ambient (global) guards
//   LowerTensors.cpp     TENSOR_MATCH and the other per-tensor guards
//   LowerShapeExpr.cpp   SHAPE_ENV expressions (shape_expr guards)
//   LowerRelational.cpp  guards over several values (aliasing, overlap)
//
// The generated function is the interpreter (lib/Runtime/Interpreter.cpp)
// unrolled over one guard set; see Lowering.cpp for the order of evaluation,
// the cleanup chain of new references and the split into bounded functions
// (LoweringOptions::ChunkSteps). The emitters see one function at a time
// (F, FrameLocals, LocalStatePtr, RefArray, Vals are the current chunk's).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_LIB_JIT_LOWERER_H
#define GUARDJIT_LIB_JIT_LOWERER_H

#include "guardjit/IR/GuardSet.h"
#include "guardjit/JIT/Lowering.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/ShapeEval.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Twine.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace guardjit {

struct TensorLayout;

class Lowerer {
public:
  /// `BS` null lowers `S` with symbolic addresses (lowerGuardSetSymbolic);
  /// `Table` non-null lowers it relocatable (lowerGuardSetRelocatable): the
  /// per-set addresses are absolute symbols `gj.a.<slot>`, whose layout is
  /// appended to *Table (the memo slots: offsets from one, memoAddress).
  Lowerer(const GuardSet &S, const BoundGuardSet *BS, llvm::Module &M,
          LoweringOptions Options = {},
          std::vector<TableSlot> *Table = nullptr);

  llvm::Expected<llvm::Function *> run(llvm::StringRef Name,
                                       LoweringStats &Stats);

private:
  // --- Lowering.cpp: driver and shared emission utilities.
  llvm::Error validate() const;
  std::string describe(size_t GuardIndex) const;

  llvm::FunctionCallee helper(llvm::StringRef Name, llvm::Type *Ret,
                              llvm::ArrayRef<llvm::Type *> Params);
  llvm::Constant *pointer(const void *Address);
  /// The addresses of the BoundGuardSet: immediates, symbols standing for
  /// them (symbolic), or absolute symbols the linker binds (relocatable).
  /// The one place where a per-set address is materialized.
  llvm::Value *address(TableSlot::SlotKind K, uint32_t Index) {
    if (Table)
      return tableSlot(K, Index);
    if (!BS)
      return symbol(symbolicName(K, Index));
    return pointer(tableSlotAddress(*BS, {K, Index}));
  }
  llvm::Value *object(ObjectId Id) { return address(TableSlot::Object, Id); }
  llvm::Value *payload(size_t GuardIndex) {
    return address(TableSlot::Payload, static_cast<uint32_t>(GuardIndex));
  }
  /// The memo slot / read descriptor of value `Id` and of guard
  /// `GuardIndex`. Relocatable: an offset into the one memo array
  /// (memoAddress).
  llvm::Value *valueMemo(ValueId Id) {
    return Table ? memoAddress(MemoOfValue[Id])
                 : address(TableSlot::ValueMemo, Id);
  }
  llvm::Value *guardMemo(size_t GuardIndex) {
    return Table ? memoAddress(MemoOfGuard[GuardIndex])
                 : address(TableSlot::GuardMemo,
                           static_cast<uint32_t>(GuardIndex));
  }
  /// Relocatable lowering: `getelementptr i8, @gj.a.<m>, Slot *
  /// sizeof(ReadDescriptor)` of the TableSlot::Memos slot (null for
  /// NoMemoSlot, as tableSlotAddress gives for a value without a memo).
  llvm::Value *memoAddress(uint32_t Slot);
  /// Slot `Index` of the recorded-object table (BoundGuardSet::recordedSlots),
  /// loaded: a borrowed `PyObject*` that subtree skipping wrote.
  llvm::Value *recordedSlot(int64_t Index, const std::string &Name) {
    llvm::Value *Table = address(TableSlot::Recorded, 0);
    llvm::Value *Addr = B.CreateConstInBoundsGEP1_64(
        PtrTy, Table, static_cast<uint64_t>(Index), Name + ".slot");
    auto *L = B.CreateAlignedLoad(PtrTy, Addr, llvm::Align(8), Name);
    L->setMetadata(llvm::LLVMContext::MD_nonnull, llvm::MDNode::get(Ctx, {}));
    return L;
  }
  static std::string symbolicName(TableSlot::SlotKind K, uint32_t Index);
  /// Relocatable lowering: the absolute symbol of slot (K, Index) of the
  /// address table, assigning the slot on first use.
  llvm::Value *tableSlot(TableSlot::SlotKind K, uint32_t Index);
  /// An external global `Name` that is an absolute address anywhere in the
  /// 64-bit space: a 64-bit immediate in the code, patched by the linker.
  llvm::Constant *absoluteSymbol(const llvm::Twine &Name);
  /// An external global named `Name` (symbolic and relocatable lowering).
  llvm::Constant *symbol(const llvm::Twine &Name) {
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

  /// Ends a step: with a pending condition, branches on it to a new block
  /// `Name` or to the current failure target; without one, the next step
  /// goes on in the current block (a block per step would only add blocks
  /// for code generation to lay out and the fast register allocator to
  /// spill across).
  void beginBlock(const llvm::Twine &Name);
  /// Makes the next beginBlock branch to the failure target unless `Ok`.
  void failUnless(llvm::Value *Ok) {
    assert(!PendingOk && "one pending condition at a time");
    PendingOk = Ok;
  }
  llvm::Value *isTrue(llvm::Value *I32Result) {
    return B.CreateICmpNE(I32Result, llvm::ConstantInt::get(I32, 0));
  }
  /// Branches to `Target` when `Cond` holds, else continues in a new block.
  void branchIf(llvm::Value *Cond, llvm::BasicBlock *Target,
                const llvm::Twine &Name);
  /// A guard helper call `Fn(Args...)` returning i32, as an i1 "passes";
  /// counted as a helper guard. `P` is the guard's name stem.
  llvm::Value *callCheck(llvm::StringRef Fn,
                         llvm::ArrayRef<llvm::Type *> Params,
                         llvm::ArrayRef<llvm::Value *> Args,
                         const std::string &P, LoweringStats &Stats);
  /// `Ok`, counted as an inlined guard.
  llvm::Value *inlineCheck(llvm::Value *Ok, LoweringStats &Stats) {
    ++Stats.NumInlined;
    return Ok;
  }

  // --- LowerAccessors.cpp: value reads.
  llvm::Value *loadField(llvm::Value *Obj, size_t Offset, llvm::Type *Ty,
                         const llvm::Twine &Name);
  llvm::Value *loadType(llvm::Value *Obj, const llvm::Twine &Name);
  /// A pointer-sized load at a negative offset (the object pre-header).
  llvm::Value *loadPreHeader(llvm::Value *Obj, int64_t Offset,
                             const llvm::Twine &Name);
  llvm::Value *emitGenericDict(llvm::Value *Obj, const std::string &Name);
  llvm::Value *emitGetAttr(ValueId Id, llvm::Value *Parent,
                           const std::string &Name);
  void emitValue(ValueId Id, LoweringStats &Stats);
  void emitInlineSequenceItem(ValueId Id, bool IsTuple);
  std::pair<llvm::BasicBlock *, llvm::BasicBlock *>
  emitMemoTest(llvm::Value *Slot, llvm::Value *Dict,
               const std::string &Name);
  /// emitMemoTest's answer as an i1, branch-free (LoweringOptions::Compact).
  llvm::Value *emitMemoHit(llvm::Value *Slot, llvm::Value *Dict,
                           const std::string &Name);
  /// `Fill` is the miss helper, `Whole` the helper that makes the whole
  /// read through the slot's ReadDescriptor (LoweringOptions::CallMemo;
  /// `Arg` is then in the descriptor).
  llvm::Value *emitMemoRead(ValueId Id, llvm::Value *Dict,
                            llvm::StringRef Fill, llvm::StringRef Whole,
                            llvm::Type *ArgTy, llvm::Value *Arg,
                            const std::string &Name);
  void emitRelease(llvm::Value *Obj);
  /// CallMemo: the descriptors First..First+N-1, steps from one parent
  /// (readPaths: a read by nothing after its fused guards, or a path down
  /// to one), as one gj_rt_read_run call.
  void emitReadRun(ValueId First, size_t N, LoweringStats &Stats);
  /// CallMemo: the DICT_CONTAINS guards Indices (one value, consecutive in
  /// the schedule) as one gj_rt_dict_contains_run call.
  void emitDictContainsRun(llvm::ArrayRef<size_t> Indices,
                           LoweringStats &Stats);

  // --- Guards. emitGuard (Lowering.cpp) starts the guard's block and
  // dispatches; each emitter returns the guard's i1 "passes" condition, or
  // null when it already branched to the failure target itself.
  void emitGuard(size_t Index, LoweringStats &Stats);

  // --- Lowering.cpp: the split into chunk functions (ChunkSteps).
  /// Starts chunk function number Chunks.size(): F and the frame state
  /// (FrameLocals, LocalStatePtr, RefArray, RefCount, the failure target)
  /// become its own.
  void beginChunk();
  /// Ends the current chunk: passing returns 1, failing 0.
  void endChunk();
  /// Before a step of a new chunk: when the chunk boundary is due, ends the
  /// chunk and begins the next; counts `Steps` towards it.
  void chunkStep(size_t Steps);
  /// Makes Vals[Id] usable in the current chunk: a value defined in an
  /// earlier chunk is stored to its frame array slot right after its
  /// definition there and loaded here (once per chunk).
  void localize(ValueId Id);
  void localize(llvm::ArrayRef<ValueId> Ids) {
    for (ValueId Id : Ids)
      localize(Id);
  }
  /// Records Vals[Id] as defined in the current chunk.
  void defined(ValueId Id);
  /// LowerLeafGuards.cpp: one operand or none.
  llvm::Value *emitLeafGuard(size_t Index, LoweringStats &Stats);
  /// LowerTensors.cpp.
  static bool isTensorGuard(GuardKind K);
  llvm::Value *emitTensorGuard(size_t Index, LoweringStats &Stats);
  /// TENSOR_MATCH reading the TensorImpl through `L` (verified), with the
  /// helper for tensors outside the layout's verified region.
  llvm::Value *emitInlineTensorMatch(size_t Index, const TensorLayout &L,
                                     LoweringStats &Stats);
  /// LowerRelational.cpp: guards over several values.
  static bool isRelationalGuard(GuardKind K);
  llvm::Value *emitRelationalGuard(size_t Index, LoweringStats &Stats);
  /// The OBJECT_ALIASING guards `Indices`, fused into one block.
  void emitFusedAliasing(llvm::ArrayRef<size_t> Indices, LoweringStats &Stats);

  // --- LowerShapeExpr.cpp.
  void emitShapeGuard(size_t Index);
  llvm::Value *emitShapeNode(const ShapeExpr &E, size_t I,
                             const std::vector<ShapeType> &Types,
                             const std::vector<llvm::Value *> &Reads,
                             llvm::BasicBlock *Unknown, const std::string &P);
  llvm::Value *emitShapeBinary(ShapeOp Op, llvm::Value *A, ShapeType TA,
                               llvm::Value *B, ShapeType TB,
                               llvm::BasicBlock *Unknown,
                               const std::string &P);

  const BoundGuardSet *BS;
  /// Relocatable lowering: the table layout being built and slot numbers
  /// by (kind << 32 | index).
  std::vector<TableSlot> *Table;
  llvm::DenseMap<uint64_t, unsigned> SlotOf;
  /// Relocatable lowering: the memo layout (layoutMemos), set by run().
  std::vector<uint32_t> MemoOfValue, MemoOfGuard;
  const GuardSet &S;
  /// LoweringOptions::Compact (implied by CallMemo) and CallMemo.
  bool Compact;
  bool CallMemo;
  llvm::Module &M;
  llvm::LLVMContext &Ctx;
  llvm::IRBuilder<> B;
  llvm::PointerType *PtrTy;
  llvm::IntegerType *I32, *I64;
  llvm::MDNode *Likely;

  /// ChunkSteps (LoweringOptions); Split: this set is lowered to chunks.
  uint32_t ChunkSteps;
  bool Split = false;
  /// Split: the entry function (the check's symbol), the chunks in call
  /// order with their frame array argument, the steps in the current chunk.
  llvm::Function *Entry = nullptr;
  std::vector<llvm::Function *> Chunks;
  std::vector<llvm::Value *> ChunkSpill;
  size_t ChunkSize = 0;
  /// Split, per value: its definition, the chunk of the definition and of
  /// Vals[Id] (a reload after localize), its frame array slot (-1: none).
  std::vector<llvm::Value *> DefVals;
  std::vector<int32_t> DefChunk, ValChunk, SpillSlot;
  uint32_t NumSpillSlots = 0;
  bool UsesLocalState = false;
  uint64_t NumNewRefs = 0;

  llvm::Function *F = nullptr;
  llvm::Value *FrameLocals = nullptr;
  llvm::Value *LocalStatePtr = nullptr;
  std::vector<llvm::Value *> Vals;
  /// CallMemo: the guards checked inside their operand's descriptor read
  /// (fusedReadGuards), emitted as nothing.
  std::vector<bool> Fused;
  /// CallMemo: per value, the number of descriptors of the run of steps
  /// it starts (emitReadRun), 0 or 1 for none.
  std::vector<uint32_t> ReadRun;
  /// CallMemo: the new references live in a frame array `RefArray` with
  /// their count in `RefCount`; one block ("fail.release") releases them
  /// on every failure after the first, one call on success. Split: the
  /// array is the entry's, which releases it when the check ends; the
  /// chunks only fill it (RefsInArray).
  llvm::Value *RefArray = nullptr, *RefCount = nullptr;
  bool RefsInArray = false;
  llvm::BasicBlock *RefFail = nullptr;
  /// CallMemo: creates "fail.release" (once) and makes it the failure
  /// target: every failure from here on releases the frame array.
  void useRefArray();
  /// Where a failure goes now: the cleanup block of the newest new reference.
  llvm::BasicBlock *FailTarget = nullptr;
  /// New references in acquisition order.
  std::vector<std::pair<ValueId, llvm::Value *>> NewRefs;
  std::vector<llvm::BasicBlock *> ReleaseBlocks;
  llvm::BasicBlock *CommonFail = nullptr;
  llvm::Value *PendingOk = nullptr;
};

} // namespace guardjit

#endif // GUARDJIT_LIB_JIT_LOWERER_H
