//===- Lowering.h - Guard IR to LLVM IR -------------------------*- C++ -*-===//
//
// Lowers one BoundGuardSet to one LLVM function `i32 @name(ptr %frame_locals)`
// with the signature of guardjit::CheckFn. The function is the interpreter's
// meaning written out: one block per value read ("v3.dict_get_item") and per
// guard ("g12.tensor_match"), a common fail block that releases new references
// and returns 0, and a success block that releases them and returns 1.
//
// Object addresses and payload pointers of the BoundGuardSet are baked in as
// immediates, so the set must outlive any code compiled from the function.
// Cheap, exact checks (TYPE_MATCH, ID_MATCH, NONE/TRUE/FALSE/NOT_NONE, the
// identity fast path of EQUALS_MATCH, type(), tuple/list item reads, an
// already materialized managed __dict__) are inlined with the layouts of
// Runtime/CPythonABI.h; the OBJECT_ALIASING guards of a set are fused into one
// block of pointer compares after the value reads. Dict reads (frame_local,
// dict_get_item, dict_key, dict_value) and DICT_CONTAINS test their
// DictReadCache slot inline (the PEP 509 memo; slots are owned by the
// BoundGuardSet) and call a fill helper on a miss. Everything else calls the
// gj_rt_* helpers of Runtime/RuntimeHelpers.h by name. With
// LoweringOptions::Compact the memo tests are branch-free and the module
// attribute, __dict__ and LENGTH_CHECK fast paths are helper calls (the
// helpers make the same tests ahead of time): about a third of the IR. With
// LoweringOptions::CallMemo (the first tier) reads go through one
// ReadDescriptor pointer each, and the simple guards after them are checked
// inside the read's helper.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_JIT_LOWERING_H
#define GUARDJIT_JIT_LOWERING_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llvm {
class Function;
class Module;
} // namespace llvm

namespace guardjit {

class BoundGuardSet;
class GuardSet;

/// What the lowering emitted.
struct LoweringStats {
  size_t NumGuards = 0;
  /// Guards emitted as loads and compares only (no call).
  size_t NumInlined = 0;
  /// Guards that call a runtime helper (EQUALS_MATCH counts here even though
  /// its identity fast path is inline).
  size_t NumHelpers = 0;
  /// Value reads emitted inline (type(), tuple/list item, globals).
  size_t NumInlineReads = 0;
};

/// How the lowering spends code on the steps that have an inline form.
struct LoweringOptions {
  /// Less IR for the first tier, whose compile latency is what a new set
  /// waits for: the memo hit test of dict reads and DICT_CONTAINS as one
  /// branch-free block (three blocks per read instead of six), and one
  /// runtime helper call for a module attribute read
  /// (gj_rt_getattr_cached), a generic __dict__ read and LENGTH_CHECK,
  /// whose helpers make the inline form's tests ahead of time. Blocks and
  /// instructions per guard drop about 3x. The hot checks (TYPE_MATCH,
  /// ID_MATCH, None/True/False, type(), tuple/list items, EQUALS_MATCH's
  /// identity, memo hits, fused aliasing) stay inline either way.
  bool Compact = false;
  /// Compact, and the memoized reads, __code__ and getitem reads and
  /// DICT_CONTAINS are whole calls taking one pointer, their ReadDescriptor
  /// (gj_rt_*_desc: the key, index or expected answer is in it). The simple
  /// guards that follow such a read (TYPE_MATCH, ID_MATCH, None/True/False,
  /// NOT_NONE, EQUALS_MATCH; fusedReadGuards) are checked by its helper and
  /// emit nothing; a new reference nothing else reads is released by it;
  /// runs of such reads of one parent and of DICT_CONTAINS on one value are
  /// one call over their contiguous descriptors (gj_rt_read_run,
  /// gj_rt_dict_contains_run). About 0.55x the machine code of the memo
  /// calls alone, for one call (a few ns) per memoized read that hits.
  bool CallMemo = false;
  /// 0: the check is one function. N > 0, for a set of more than N steps
  /// (a step is a value read or a guard): the steps go into functions of
  /// about N steps each ("<name>.c0", ...), called in order from the entry
  /// function `Name`, the first failing one ending the check. Code
  /// generation above O0 (the greedy register allocator, machine CSE, the
  /// execution-domain fix) costs super-linear time in a function's size;
  /// bounded functions keep a compile linear in the guards. A value read
  /// in one function and used in a later one is passed through a frame
  /// array of the entry, which also owns every new reference (released
  /// when the check ends, as the interpreter does).
  uint32_t ChunkSteps = 0;
};

/// Adds the check function of `Set` to `M` under the symbol `Name`. `M` must
/// already carry the target's data layout. Reads only the IR and the bound
/// addresses of `Set` (no Python call, no GIL needed). Fails, leaving `M`
/// unchanged except for helper declarations, when the IR is malformed (an
/// operand or object id out of range, a leaf guard without operand).
llvm::Expected<llvm::Function *>
lowerGuardSet(const BoundGuardSet &Set, llvm::Module &M, llvm::StringRef Name,
              LoweringStats *Stats = nullptr, LoweringOptions Options = {});

/// Lowers `Set` without live objects, for reading the code of parsed IR
/// (`guard-ir-opt --emit=llvm|asm`). Where lowerGuardSet bakes in addresses,
/// this refers to external globals: object #N is `@gj.obj.N`, the payload of
/// guard G `@gj.payload.gG`, the lookup memos `@gj.memo.vN` (value N) and
/// `@gj.memo.gG` (guard G), CPython's statics their C symbols
/// (`@_Py_NoneStruct`). The code is otherwise what lowerGuardSet emits; it is
/// not meant to be linked or run.
llvm::Expected<llvm::Function *>
lowerGuardSetSymbolic(const GuardSet &Set, llvm::Module &M,
                      llvm::StringRef Name, LoweringStats *Stats = nullptr,
                      LoweringOptions Options = {});

/// One slot of the address table of relocatable code: which address of a
/// BoundGuardSet it holds. The layout is a pure function of the IR, so the
/// code and its layout can be cached and bound to another process's set.
struct TableSlot {
  enum SlotKind : uint8_t {
    Object,    ///< BoundGuardSet::object(Index)
    Payload,   ///< BoundGuardSet::payload(Index) (a guard index)
    ValueMemo, ///< BoundGuardSet::readDescriptor(Index) (a value id): its
               ///< memo slot (dictCache) where it has one. Baked-in and
               ///< symbolic lowering only; relocatable code uses Memos.
    GuardMemo, ///< BoundGuardSet::guardCache(Index) (a guard index); as
               ///< ValueMemo
    Recorded,  ///< BoundGuardSet::recordedSlots() (Index 0)
    Memos,     ///< BoundGuardSet::memos() (Index 0): the base of the one
               ///< array of all memo slots / read descriptors; relocatable
               ///< code addresses each as this base plus a byte offset
               ///< (layoutMemos), the relocation's addend
    LastKind = Memos,
  };
  SlotKind Kind;
  uint32_t Index;
};

/// Lowers `Set` to position-independent code with no address of a live
/// object in it: every per-set address (objects, payloads, the memo array,
/// the recorded-object table) is an external absolute symbol
/// `gj.a.<k>` (RelocatableAddressPrefix + k, `!absolute_symbol`), a 64-bit
/// immediate the linker patches, where slot k of the address table holds
/// what Table[k] names (appended in order of first use). Memo slots / read
/// descriptors are not slots of their own: each is
/// `getelementptr i8, @gj.a.<m>, <byte offset>` of the one TableSlot::Memos
/// slot, by layoutMemos (a pure function of the IR, as bind lays them out),
/// so the relocation carries the offset as its addend. CPython's statics
/// and the gj_rt_* helpers are referenced by name (the engine defines both).
/// Whoever links the code binds `gj.a.<k>` to tableSlotAddress(Set,
/// Table[k]). Reads only `Set`; the same IR always gives the same module, so
/// the object can be cached and bound to a set in another process.
llvm::Expected<llvm::Function *>
lowerGuardSetRelocatable(const GuardSet &Set, llvm::Module &M,
                         llvm::StringRef Name, std::vector<TableSlot> &Table,
                         LoweringStats *Stats = nullptr,
                         LoweringOptions Options = {});
constexpr const char RelocatableAddressPrefix[] = "gj.a.";

/// Prepares relocatable code for FastISel (the O0 and Light code levels),
/// after the IR passes and right before code generation: FastISel cannot
/// select anything that touches a global of the large code model and hands
/// the rest of the block to the SelectionDAG (about 2x the code generation
/// time and slower code on dict reads). So the address symbols become small
/// code model again, and every load and store from one of them goes through
/// a `freeze` of the symbol, materialized with a `movabs` and never folded
/// into a RIP-relative operand; a constant offset from a symbol (a memo
/// slot in the one memo array) becomes a `getelementptr` of the frozen
/// symbol. Measured with LLVM 19 (`-pass-remarks-missed=isel`): FastISel
/// itself misses each such `freeze` of an absolute symbol, so the
/// SelectionDAG still selects it and what precedes it in its block (the
/// same 5,397 misses over the ObjectCache bench's sets before and after the
/// memo array became one symbol). No IR pass may run afterwards (it would
/// fold the freeze away).
void prepareRelocatableForFastISel(llvm::Module &M);

/// The address slot `Slot` of relocatable code holds for `Set`, or nullptr
/// when `Slot` is out of range for it (a table from another set; a Memos
/// slot of a set without memos).
/// `*InRange` (optional) tells the two kinds of nullptr apart.
const void *tableSlotAddress(const BoundGuardSet &Set, TableSlot Slot,
                             bool *InRange = nullptr);

/// A runtime helper that generated code may call, and its address in this
/// process. The engine defines all of them as absolute symbols.
struct RuntimeSymbol {
  const char *Name;
  void *Address;
};
llvm::ArrayRef<RuntimeSymbol> runtimeSymbols();
/// CPython's statics that relocatable and symbolic code name
/// (`_Py_NoneStruct`, `PyDict_Type`, ...), with their addresses in this
/// process. The engine defines them as absolute data symbols.
llvm::ArrayRef<RuntimeSymbol> cpythonStatics();

/// What lowering takes from the installed TorchHooks' TensorLayout (whether
/// TENSOR_MATCH is read inline, and at which offsets), for the object cache
/// key: code lowered under one layout is not reused under another.
std::string tensorLayoutKey();

} // namespace guardjit

#endif // GUARDJIT_JIT_LOWERING_H
