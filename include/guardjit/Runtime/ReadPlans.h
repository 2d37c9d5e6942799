//===- ReadPlans.h - How the first tier reads memoized values ---*- C++ -*-===//
//
// The memo of one dict read (DictReadCache), the descriptor through which
// the first tier reads a value with its fused guards (ReadDescriptor), and
// the two IR analyses, mirroring the lowering's schedule, that say which
// guards fuse into a read and which reads form a path. Bind and the
// lowering (in any process) compute the same answers from the IR alone.
// The helpers that run descriptors (gj_rt_*_desc, gj_rt_read_run) are
// declared in RuntimeHelpers.h and defined in lib/Runtime/ReadPlans.cpp.
//
// Runtime layer: plain CPython, no LLVM types.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_RUNTIME_READPLANS_H
#define GUARDJIT_RUNTIME_READPLANS_H

#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/Python.h"

#include <cstdint>
#include <vector>

namespace guardjit {

/// One read site's memo of a `PyDict_GetItem(Dict, Key)` probe, keyed on the
/// dict's PEP 509 version tag. Owned by the BoundGuardSet (one slot per
/// value), written only with the GIL held. No field is a reference.
///
/// Why a hit is exact (CPython 3.11, Objects/dictobject.c):
///  * `ma_version_tag` comes from one process-wide 64-bit counter: every new
///    dict gets a fresh value (new_dict, dict_new) and every mutation that can
///    change what a lookup returns (insert/replace of a different value,
///    delete, clear, pop, merge, resize, STORE_ATTR_WITH_HINT) stores a fresh
///    one. Tags are never reused, so (address, tag) names one state of one
///    dict object. A dict freed and replaced by a new dict at the same
///    address has a larger tag and misses.
///  * The hit test first checks that the object at `Dict` is an exact dict
///    (its type is &PyDict_Type), so the tag it reads is a real tag even when
///    the old dict died and some other object now lives at that address.
///  * A slot is filled only when the probe was pure: `Key` is an exact str
///    and the dict's keys are all exact str (dk_kind != DICT_KEYS_GENERAL),
///    so the lookup compared str objects only and ran no user __eq__/__hash__.
///    Same dict state + same key => same entry. (Reads by insertion index,
///    DictKey/DictValue, walk the entry table and are always pure.)
///  * `Value` is borrowed: while the tag is unchanged the dict still holds a
///    reference to it, so it is alive whenever a hit returns it. After the
///    dict changes the pointer may dangle, but it is never read then.
///  * Only non-NULL results are cached; a miss (NULL) fails the check anyway.
struct DictReadCache {
  PyObject *Dict = nullptr;
  uint64_t Tag = 0;
  PyObject *Value = nullptr;
};

/// A memoized read (or DICT_CONTAINS) as the first tier
/// (LoweringOptions::CallMemo) calls it, through one pointer: the memo slot
/// first (so the descriptor's address is the slot's), then the read's
/// constant operands and the checks of the guards fused into the read
/// (fusedReadGuards). Native code passes one address where it passed the
/// key and the slot as two 64-bit immediates, and a fused guard costs no
/// code at all. BoundGuardSet::bind fills every field from the IR and the
/// bound objects alone, so relocatable code cached by another process finds
/// the same descriptor; the BoundGuardSet owns it (it outlives the code).
/// No field is a reference (the object table holds them).
struct ReadDescriptor {
  DictReadCache Memo;
  /// The dict key or attribute name of the read, DICT_CONTAINS's key.
  PyObject *Key = nullptr;
  /// DictKey/DictValue: the index; DICT_CONTAINS: the expected answer (0/1).
  int64_t Int = 0;
  /// Fused TYPE_MATCH: the value's exact type must be `Type`.
  PyObject *Type = nullptr;
  /// Fused ID_MATCH / NONE_MATCH / TRUE_MATCH / FALSE_MATCH: the value must
  /// be `Is`; fused NOT_NONE: it must not be `IsNot` (None).
  PyObject *Is = nullptr;
  PyObject *IsNot = nullptr;
  /// Fused EQUALS_MATCH: `Equals` itself, or gj_rt_equals_match.
  PyObject *Equals = nullptr;
  /// The AccessorKind of the read (gj_rt_read_run dispatches on it); -1 in
  /// a guard's descriptor.
  int64_t Accessor = -1;
  /// The number of descriptors of the read path this read starts
  /// (readPaths), >= 2; 0 otherwise.
  int64_t Path = 0;
};

/// Per guard of `S`, whether the first tier checks it inside the
/// descriptor read of its operand (ReadDescriptor) instead of emitting it:
/// the leading run of TYPE_MATCH, ID_MATCH, NONE/TRUE/FALSE_MATCH,
/// NOT_NONE and EQUALS_MATCH guards that the lowering schedules right after
/// a descriptor read (accessorHasReadDescriptor), each field at most once. Only
/// guards that would run next anyway, in the same order of side effects
/// (EQUALS_MATCH's __eq__ last). A pure function of the IR: bind and the
/// lowering (in any process) agree on it.
std::vector<bool> fusedReadGuards(const GuardSet &S);
/// Per value of `S`, what the first tier reads as one step of a run
/// (gj_rt_read_run), given `Fused` (fusedReadGuards): 1 for a descriptor
/// read that nothing reads after its fused guards; N >= 2 for the first of
/// a read path of N such reads with consecutive ids, each (but the last)
/// a descriptor read whose only reader is its one child, the next id, the
/// last one read by nothing (`obj.forward.__code__`); 0
/// for any other value, the later members of a path included. A pure
/// function of the IR: bind (ReadDescriptor::Path) and the lowering (in
/// any process) agree on it.
std::vector<uint32_t> readPaths(const GuardSet &S,
                                const std::vector<bool> &Fused);
} // namespace guardjit

#endif // GUARDJIT_RUNTIME_READPLANS_H
