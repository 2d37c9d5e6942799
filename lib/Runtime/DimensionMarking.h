//===- DimensionMarking.h - DIMENSION_DYNAMIC_MARKING_GUARD payload -*- C++ -*-//
//
// Private to the Runtime library: the native form of one
// DIMENSION_DYNAMIC_MARKING_GUARD, prepared by BoundGuardSet::bind and read by
// gj_rt_dimension_marking (DimensionMarking.cpp).
//
// IR form (what the recorder stores): Guard.Object is a tuple
//   (expected_attrs: dict[str, set[int]],
//    absent_attrs: list[str],
//    dependent_attrs: dict[str, tuple[expected | None, gate_attr: str]])
// i.e. exactly the first three arguments Dynamo passes to
// GuardManager.add_dimension_marking_guard, bound as a strong object.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_LIB_RUNTIME_DIMENSIONMARKING_H
#define GUARDJIT_LIB_RUNTIME_DIMENSIONMARKING_H

#include "guardjit/Runtime/Python.h"
#include "guardjit/Runtime/ReadPlans.h"

#include <string>
#include <vector>

namespace guardjit {

/// Every PyObject* here is a strong reference owned by the payload, so later
/// mutation of the recorder's dicts cannot change or free what the check
/// reads (Dynamo likewise copies the containers but keeps the set objects).
struct DimensionMarkingPayload {
  // Read on every check, first: the memo of the fast "no
  // _has_dynamo_dim_marking" test (DimensionMarking.cpp), two gate-free types
  // (a set usually guards both Tensors and Parameters) by their
  // attribute-cache version: `_PyType_Lookup(GateFreeType[I], gate)` was
  // NULL while the type's tag was GateFreeTag[I]. Not references; written
  // with the GIL held; never changes an answer.
  mutable PyTypeObject *GateFreeType[2] = {nullptr, nullptr};
  mutable unsigned int GateFreeTag[2] = {0, 0};
  /// Guards of one bound set sharing this payload (bind shares the payload
  /// of identical unmarked specs; releaseDimensionMarking frees at zero).
  unsigned Refs = 1;

  struct Expected {
    PyObject *Name; ///< str attribute name
    PyObject *Set;  ///< compile-time marking set; `issubset` argument
  };
  struct Dependent {
    PyObject *Name;     ///< attribute compared by ==
    PyObject *Expected; ///< compile-time value (None when it was absent)
    PyObject *Gate;     ///< compared only when the value has this attribute
  };
  std::vector<Expected> ExpectedAttrs;
  std::vector<PyObject *> AbsentAttrs;
  std::vector<Dependent> DependentAttrs;

};

/// What one DIMENSION_DYNAMIC_MARKING guard's payload pointer points to: its
/// (possibly shared) spec and its own memo of the last gate-free instance
/// dict, by (address, PEP 509 tag) as in DictReadCache (Value unused): a
/// guard sees the same tensor call after call, while a shared memo would
/// thrash between tensors. bind() lays the slots out contiguously (two per
/// cache line).
struct DimensionMarkingSlot {
  DimensionMarkingPayload *Spec = nullptr; ///< one of Spec->Refs shares
  mutable DictReadCache GateFreeDict;
};
static_assert(sizeof(DimensionMarkingSlot) == 32, "two slots per line");

/// Builds the payload from the bound tuple (see the file comment). GIL held.
/// Returns nullptr and sets *Error when `Spec` has the wrong shape.
DimensionMarkingPayload *prepareDimensionMarking(PyObject *Spec,
                                                 std::string *Error);
/// Drops one guard's share; the last releases the references and frees the
/// payload. GIL held.
void releaseDimensionMarking(DimensionMarkingPayload *P);
/// Whether payloads `A` and `B` always give the same answer on the same
/// value: both for an unmarked tensor (no expected or dependent attrs) with
/// the same absent attribute names (exact strs, equal, in order). Then one
/// payload serves both guards. GIL held.
bool sameUnmarkedSpec(const DimensionMarkingPayload &A,
                      const DimensionMarkingPayload &B);

} // namespace guardjit

#endif // GUARDJIT_LIB_RUNTIME_DIMENSIONMARKING_H
