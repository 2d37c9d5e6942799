//===- SubtreeSkip.h - Sound skipping of unchanged subtrees ------*- C++ -*-===//
//
// What torch's `use_recursive_dict_tags_for_guards` tried, made sound. Most of
// a model's guards sit under nn.Module subtrees whose objects do not change
// between calls; each value there is a pure function of its parent's
// identity and of the contents of some dicts and types. A SkipPlan splits a
// bound guard set F into
//
//  * stable values: values whose object is determined by their parent plus
//    "this dict / this type is unchanged" (dict items, __dict__, plain
//    attributes found in an instance dict or a type, type(), tuple items,
//    function fields), reached from an anchor (a frame local or f_globals);
//  * a validation program: one step per dict tag, type version, __dict__
//    pointer and function field those values depend on, in tree order;
//  * the residual set R: F with every stable value replaced by a `recorded`
//    slot and every guard that the validation implies dropped (identity,
//    None/True/False, equality of an immutable object with an immutable
//    constant, dict length, keys and versions, aliasing between stable
//    values; record() refuses a snapshot whose object of an implied equality
//    is not deeply immutable). What no dict version captures stays in R:
//    TYPE_MATCH (`__class__` can be reassigned), tensor metadata
//    (`requires_grad_`, `.data =`, `set_`, `resize_` change no dict), list
//    contents, relations reaching outside, global state, inputs.
//
// After a full check of F passes, record() reads the stable values and the
// expectations of every step. On a later call validate() runs the steps; when
// all hold, every stable value is the recorded object in the recorded state,
// so F's answer equals R's. A failing step only means "changed": the caller
// runs F again (and records again when it passes). Never a failure by itself.
//
// Why every stable value is the recorded object: each is a pure function of
// its parent's state that a step checks on every call (a dict's tag for its
// items, the owner's type and __dict__ pointer, a type's version for its
// attributes, a function's field), or -- tuple items, which no step checks
// -- of its parent's identity, so their parent must itself be recorded,
// never an anchor (a frame local may be a new tuple on every call).
//
// Why no recorded pointer can dangle or be confused with a new object at the
// same address: CPython 3.11 gives every dict mutation and every new dict a
// fresh value of one global counter (PEP 509 `ma_version_tag`), and every
// type change a fresh `tp_version_tag`, so a (live object, tag) pair can only
// match the recorded state itself. A Field step has no tag: it compares the
// owner's field with the recorded pointer, so the plan holds a strong
// reference to each object a Field step recorded (until the next record() or
// its destruction); a live owner whose field equals it points at that very
// object, never at a new one allocated where a freed one was (a function's
// `__defaults__` tuple replaced twice, the second landing on the first's
// address from the tuple free list, would otherwise pass with new items).
// Steps run parents first and only dereference objects that are anchors of
// this call or are held by a container a previous step proved unchanged (or,
// for a Field step's object, by the plan). A tag of 0, or a type without a
// valid version tag, never matches. (3.12+ dict watchers can replace the tag
// steps behind the same interface; this build refuses other versions.)
//
// Thread/GIL: every function needs the GIL. validate() and record() call no
// Python code and release nothing (record() drops the previous snapshot's
// held objects once the new one is taken, which may run finalizers); R
// calls no Python either, so validation plus R is atomic with respect to
// other Python threads and to any code that could free a recorded object.
// The guards of F that may run Python (a hasattr on a config whose type runs
// Python, `__name__` of a class, a read through a user __getattr__), with
// every guard on a value read through such a read, form the prelude: a set
// read from the frame locals through F's own accessors, run *before*
// validate(). Its answers are F's answers for those guards (the same reads,
// as fresh as in F), and whatever its Python changes, validation sees
// afterwards. The check is prelude && validate && R; a failing prelude is a
// failing check (those guards are F's). Mirrors (and fixes) torch 2.13's GuardManager dict-tag fast path
// (torch/csrc/dynamo/guards.cpp, `check_dict_tags` / `_dict_pointers` /
// `_tag_safe_entries`).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_RUNTIME_SUBTREESKIP_H
#define GUARDJIT_RUNTIME_SUBTREESKIP_H

#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/PythonAttr.h"
#include "guardjit/Runtime/Python.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace guardjit {

/// One validation step (see the file comment). `Src` and `Dst` index the
/// recorded-object table.
struct SkipStep {
  enum Kind : uint8_t {
    LoadLocal, ///< Dst = frame_locals[Key] (an anchor of this call)
    DictOf,    ///< type(Src) is Type and its instance dict is Expect (NULL:
               ///< none); WithTag: Expect has type DictType and tag Version
    Tag,       ///< Src has type Type and ma_version_tag == Tag
    TypeIs,    ///< type(Src) is Type
    TypeTag,   ///< type(Src) is Type with a valid tp_version_tag == Tag
    Field,     ///< type(Src) is Type and its PyObject* at byte Offset is Expect
    LoadItem,  ///< Dst = Src[Key] (exact str-keyed dict) or Src[Offset]
               ///< (exact tuple), Src an anchor of this call
    KnownType, ///< Src's attribute reads still run the registered function
               ///< `Known` (knownAttrKind, PythonAttr.h)
  };
  Kind K = Tag;
  uint32_t Src = 0;
  uint32_t Dst = 0;
  uint32_t Offset = 0;
  PyObject *Key = nullptr;    ///< LoadLocal: the exact-str name (borrowed)
  PyObject *Expect = nullptr; ///< borrowed, filled by record()
  PyTypeObject *Type = nullptr;
  PyTypeObject *DictType = nullptr; ///< DictOf with WithTag
  uint64_t Version = 0;
  bool WithTag = false;
  KnownAttrKind Known = KnownAttrKind::None;
};

/// Counters of one plan (GIL held to read or write).
struct SkipStats {
  uint64_t Hits = 0;       ///< calls answered by validation + R
  uint64_t Fallbacks = 0;  ///< validation failed: F ran
  uint64_t Records = 0;    ///< snapshots taken
  uint64_t RecordFailures = 0; ///< F passed but the state was not recordable
};

class SkipPlan {
public:
  /// Builds the plan of bound set `Full`, probing the objects reachable from
  /// `FrameLocals` (a frame locals dict on which `Full` passes; borrowed) so
  /// that values whose read is not pure there (a property, a missing
  /// attribute served by __getattr__, a bound method) stay live reads.
  /// Returns nullptr and sets *WhyNot when no subtree can be skipped or the
  /// plan would not pay (skipCost() > 2/3 x fullCost()). GIL held.
  /// `CostModel` false plans whenever it can (tests of the mechanism).
  static std::unique_ptr<SkipPlan> build(const BoundGuardSet &Full,
                                         PyObject *FrameLocals,
                                         std::string *WhyNot,
                                         bool CostModel = true);
  ~SkipPlan();
  SkipPlan(const SkipPlan &) = delete;
  SkipPlan &operator=(const SkipPlan &) = delete;

  /// The residual set R (bind it, then call attach() with the result).
  std::shared_ptr<GuardSet> residual() const { return Residual; }
  /// The prelude: F's guards that may run Python, with their reads, run
  /// from the frame locals before validate() (nullptr when there are none).
  std::shared_ptr<GuardSet> prelude() const { return Prelude; }
  /// Points the plan at R's bound set, whose recorded-object table it fills.
  void attach(BoundGuardSet &BoundResidual);

  /// True when a snapshot is held and every step holds for `FrameLocals`
  /// (borrowed dict); then R decides the check. GIL held; calls no Python.
  bool validate(PyObject *FrameLocals);
  /// Takes a snapshot right after the full check passed on `FrameLocals`.
  /// False (no snapshot) when some stable value is not pure-readable now.
  /// GIL held; calls no Python until the snapshot is taken (releasing the
  /// previous snapshot's held objects, last, may run their finalizers).
  bool record(PyObject *FrameLocals);
  /// Drops the snapshot (next call runs the full check).
  void invalidate() { Valid = false; }
  bool valid() const { return Valid; }

  size_t numSteps() const { return Steps.size(); }
  size_t numStableValues() const { return NumStable; }
  /// Subtrees skipped: anchors with at least one stable descendant.
  size_t numSubtrees() const { return NumSubtrees; }
  size_t numImpliedGuards() const { return NumImplied; }
  /// The cost model's estimates per call, in pointer compares (KindFacts.h
  /// check and read costs; SubtreeSkip.cpp's step costs): F, and the
  /// skipping check (steps, R, prelude). build() declines when the second
  /// exceeds 2/3 of the first.
  double fullCost() const { return FullCost; }
  double skipCost() const { return SkipCost; }
  size_t numResidualGuards() const { return Residual->guards().size(); }
  size_t numPreludeGuards() const {
    return Prelude ? Prelude->guards().size() : 0;
  }
  SkipStats &stats() { return Stats; }

private:
  SkipPlan() = default;
  struct Slot; // how one stable value or hidden dict is read (SkipPlanReads.h)
  friend class SkipPlanBuilder;

  bool readSlot(size_t I, PyObject *FrameLocals);

  std::shared_ptr<GuardSet> Residual;
  std::shared_ptr<GuardSet> Prelude;
  std::vector<Slot> Slots;
  std::vector<SkipStep> Steps;
  PyObject **Table = nullptr; ///< R's recorded-object table
  /// Slots whose implied EQUALS_MATCH needs the recorded object itself to
  /// be deeply immutable (record() checks it): equal to an immutable
  /// constant does not make it immutable.
  std::vector<uint32_t> ImmutableSlots;
  /// Guards implied because an attribute was missing (NO_HASATTR, an
  /// unmarked tensor's DIMENSION_DYNAMIC_MARKING): record() proves each
  /// missing again on the object it records, with the same kind of read,
  /// or takes no snapshot (the build-time proof is about other objects).
  struct MissingAttr {
    uint32_t Slot;   ///< the object's slot
    uint32_t Dict;   ///< its hidden instance-dict slot
    PyObject *Name;  ///< borrowed from the bound set's objects
    KnownAttrKind Kind;
  };
  std::vector<MissingAttr> MissingAttrs;
  /// Strong references to the objects the Field steps of the last record()
  /// compare with (see the file comment); released by the next record() and
  /// by the destructor (GIL held: CheckTargets die with the GIL, TierUp.h).
  std::vector<PyObject *> Held;
  size_t NumStable = 0, NumSubtrees = 0, NumImplied = 0;
  double FullCost = 0, SkipCost = 0; ///< the cost model's estimates
  bool Valid = false;
  SkipStats Stats;
};

/// Registers torch 2.13's `torch.nn.ModuleList.__getitem__`,
/// `_get_abs_string_index` and `__len__` (plain functions whose bytecode the
/// caller checked, python/guardjit/pyattr.py): a GetItem read with an int key
/// of an object whose type resolves all three to these functions is then a
/// stable value (`self._modules[str(i)]`). Keeps strong references; false and
/// *Error for non-functions. GIL held.
bool registerModuleListGetItem(PyObject *GetItem, PyObject *AbsIndex,
                               PyObject *Len, std::string *Error);
void unregisterModuleListGetItem();

} // namespace guardjit

#endif // GUARDJIT_RUNTIME_SUBTREESKIP_H
