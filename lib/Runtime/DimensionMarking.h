//===- DimensionMarking.h - DIMENSION_DYNAMIC_MARKING_GUARD payload -*- C++ -*-//
//
// Private to the Runtime library: the native form of one
// DIMENSION_DYNAMIC_MARKING_GUARD, prepared by BoundGuardSet::bind and read by
// gj_rt_dimension_marking (RuntimeHelpers.cpp).
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
#include "guardjit/Runtime/RuntimeHelpers.h"

#include <string>
#include <vector>

namespace guardjit {

/// Every PyObject* here is a strong reference owned by the payload, so later
/// mutation of the recorder's dicts cannot change or free what the check
/// reads (Dynamo likewise copies the containers but keeps the set objects).
struct DimensionMarkingPayload {
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

  /// Memo of the fast "no _has_dynamo_dim_marking" test (RuntimeHelpers.cpp):
  /// `_PyType_Lookup(GateFreeType, gate)` was NULL while the type's
  /// attribute-cache version was GateFreeTag. Not references; written with
  /// the GIL held; never changes an answer.
  mutable PyTypeObject *GateFreeType = nullptr;
  mutable unsigned int GateFreeTag = 0;
  /// ... and the last instance dict a pure probe found without the gate, by
  /// (address, PEP 509 tag) as in DictReadCache (Value unused).
  mutable DictReadCache GateFreeDict;
};

/// Builds the payload from the bound tuple (see the file comment). GIL held.
/// Returns nullptr and sets *Error when `Spec` has the wrong shape.
DimensionMarkingPayload *prepareDimensionMarking(PyObject *Spec,
                                                 std::string *Error);
/// Releases the references and frees the payload. GIL held.
void releaseDimensionMarking(DimensionMarkingPayload *P);

} // namespace guardjit

#endif // GUARDJIT_LIB_RUNTIME_DIMENSIONMARKING_H
