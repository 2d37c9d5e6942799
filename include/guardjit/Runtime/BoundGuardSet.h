//===- BoundGuardSet.h - A guard set bound to live objects ------*- C++ -*-===//
//
// The IR of one compile unit plus what checking it needs at run time: the
// `PyObject*` of every object table entry (strong references where Dynamo
// keeps one) and the native payload of every torch guard (prepared through
// TorchHooks). Both the interpreter and the JIT read a BoundGuardSet; JIT
// code bakes its addresses in, so it must outlive the compiled function.
//
// Thread/GIL: create and destroy with the GIL held.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_RUNTIME_BOUNDGUARDSET_H
#define GUARDJIT_RUNTIME_BOUNDGUARDSET_H

#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/Python.h"
#include "guardjit/Runtime/RuntimeHelpers.h"

#include <memory>
#include <string>
#include <vector>

namespace guardjit {

struct DimensionMarkingSlot;

/// No memo slot (layoutMemos).
constexpr uint32_t NoMemoSlot = ~uint32_t(0);

/// The layout of BoundGuardSet's memo slots / read descriptors, a pure
/// function of the IR (the same IR gives the same layout in any process):
/// per value (`*ValueMemo`, sized to the values) and per guard
/// (`*GuardMemo`, sized to the guards) its index into the one contiguous
/// array, or NoMemoSlot. The order is the lowering's visiting order: each
/// value's slot (accessorHasReadDescriptor), then the slots of the guards
/// whose last operand it is (guardUsesDictCache). Returns the slot count.
/// Reads operands: `S` must be well-formed (bind and the lowering validate
/// it first).
uint32_t layoutMemos(const GuardSet &S, std::vector<uint32_t> *ValueMemo,
                     std::vector<uint32_t> *GuardMemo);

class BoundGuardSet {
public:
  /// Binds `Set`. Every object entry must have a non-zero Address (a live
  /// `PyObject*`); strong entries are INCREF'd. Returns nullptr and sets
  /// *Error (with the guard's source) when an entry is unbound or a torch
  /// guard cannot be prepared (e.g. no TorchHooks installed).
  static std::unique_ptr<BoundGuardSet> bind(std::shared_ptr<const GuardSet> Set,
                                             std::string *Error);
  ~BoundGuardSet();
  BoundGuardSet(const BoundGuardSet &) = delete;
  BoundGuardSet &operator=(const BoundGuardSet &) = delete;

  const GuardSet &set() const { return *Set; }
  /// Borrowed pointers, indexed by ObjectId.
  PyObject *const *objects() const { return Objects.data(); }
  PyObject *object(ObjectId Id) const { return Objects[Id]; }
  /// The prepared payload of guard `GuardIndex`, or nullptr.
  const void *payload(size_t GuardIndex) const { return Payloads[GuardIndex]; }
  /// True when some guard needs the thread-local dispatch key state.
  bool needsLocalState() const { return NeedsLocalState; }
  /// The lookup memo of value `Id` (see DictReadCache), or nullptr when its
  /// accessor has none (accessorUsesDictCache). Slots start empty.
  /// Mutable state of a logically const set: a slot is a cache that never
  /// changes an answer; write it only with the GIL held. Native code bakes
  /// the slot addresses in, like the object addresses.
  DictReadCache *dictCache(ValueId Id) const {
    return ValueMemo[Id] == NoMemo ||
                   !accessorUsesDictCache(Set->value(Id).Kind)
               ? nullptr
               : &Memos[ValueMemo[Id]].Memo;
  }
  /// The pass memo of guard `GuardIndex` (guardUsesDictCache), or nullptr:
  /// a hit means the guard passed on this same dict state before.
  DictReadCache *guardCache(size_t GuardIndex) const {
    return GuardMemo[GuardIndex] == NoMemo ? nullptr
                                           : &Memos[GuardMemo[GuardIndex]].Memo;
  }
  /// The descriptor of value `Id` (accessorHasReadDescriptor), around
  /// dictCache(Id) when it has a memo (the same address), and of guard
  /// `GuardIndex` around guardCache(GuardIndex): what the first tier's
  /// *_desc helpers read. nullptr when there is none.
  ReadDescriptor *readDescriptor(ValueId Id) const {
    return ValueMemo[Id] == NoMemo ? nullptr : &Memos[ValueMemo[Id]];
  }
  ReadDescriptor *guardDescriptor(size_t GuardIndex) const {
    return GuardMemo[GuardIndex] == NoMemo ? nullptr
                                           : &Memos[GuardMemo[GuardIndex]];
  }
  /// The one contiguous array of all descriptors (memo slots) above, in the
  /// layout of layoutMemos: readDescriptor(Id) is
  /// `memos() + layoutMemos's ValueMemo[Id]`. Relocatable code addresses
  /// every descriptor as this base plus a constant offset.
  ReadDescriptor *memos() const { return Memos.get(); }
  size_t numMemos() const { return NumMemos; }

  /// The recorded-object table read by `recorded` values (one slot per
  /// index, null until filled): borrowed pointers that subtree skipping
  /// (SubtreeSkip.h) writes, with the GIL held, only after proving each
  /// object is still reachable unchanged. Native code bakes the address in.
  PyObject **recordedSlots() const {
    return const_cast<PyObject **>(RecordedSlots.data());
  }
  size_t numRecordedSlots() const { return RecordedSlots.size(); }
  /// Grows the table to `N` slots; only before any code is compiled from
  /// this set (the address changes).
  void reserveRecordedSlots(size_t N) {
    if (N > RecordedSlots.size())
      RecordedSlots.resize(N, nullptr);
  }

private:
  explicit BoundGuardSet(std::shared_ptr<const GuardSet> Set);
  std::shared_ptr<const GuardSet> Set;
  std::vector<PyObject *> Objects;
  std::vector<void *> Payloads;
  /// All memo slots with their descriptors, laid out in the order native
  /// code visits them.
  std::unique_ptr<ReadDescriptor[]> Memos;
  size_t NumMemos = 0;
  static constexpr uint32_t NoMemo = NoMemoSlot;
  std::vector<uint32_t> ValueMemo; ///< per value: index into Memos or NoMemo
  std::vector<uint32_t> GuardMemo; ///< per guard: index into Memos or NoMemo
  /// The payloads of the DIMENSION_DYNAMIC_MARKING guards, contiguous.
  std::unique_ptr<DimensionMarkingSlot[]> MarkingSlots;
  bool NeedsLocalState = false;
  std::vector<PyObject *> RecordedSlots;
};

/// "guard #3 (TENSOR_MATCH on L['x'])": guard `Index` of `S` (in IR order),
/// for diagnostics.
std::string describeGuard(const GuardSet &S, size_t Index);

/// "value #4 (getattr L['self'].w)": value `Id` of `S`, for diagnostics.
std::string describeValue(const GuardSet &S, ValueId Id);

} // namespace guardjit

#endif // GUARDJIT_RUNTIME_BOUNDGUARDSET_H
