//===- CPythonABI.h - CPython 3.11 layouts read by native code --*- C++ -*-===//
//
// Every CPython struct offset and flag that generated code reads, in one
// place, each checked against the headers it is compiled with. Code
// generators must take offsets from here and nowhere else: a CPython upgrade
// then fails to compile instead of producing code that reads the wrong field.
//
// Runtime layer: plain CPython, no LLVM types.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_RUNTIME_CPYTHONABI_H
#define GUARDJIT_RUNTIME_CPYTHONABI_H

#include "guardjit/Runtime/Python.h"

#include <cstddef>
#include <cstdint>

namespace guardjit::abi {

/// Width of a pointer and of Py_ssize_t in the generated code, in bytes.
constexpr unsigned PointerSize = 8;
static_assert(sizeof(void *) == PointerSize, "64-bit targets only");
static_assert(sizeof(Py_ssize_t) == PointerSize, "Py_ssize_t is pointer-wide");

/// PyObject::ob_type (`Py_TYPE(o)`), a `PyTypeObject*`.
constexpr size_t ObjectTypeOffset = 8;
static_assert(offsetof(PyObject, ob_type) == ObjectTypeOffset);

/// PyVarObject::ob_size (`Py_SIZE(o)`), a Py_ssize_t: tuple/list length.
constexpr size_t VarObjectSizeOffset = 16;
static_assert(offsetof(PyVarObject, ob_size) == VarObjectSizeOffset);

/// PyTypeObject::tp_flags, an `unsigned long` (8 bytes on LP64).
constexpr size_t TypeFlagsOffset = 168;
constexpr unsigned TypeFlagsSize = 8;
static_assert(offsetof(PyTypeObject, tp_flags) == TypeFlagsOffset);
static_assert(sizeof(((PyTypeObject *)nullptr)->tp_flags) == TypeFlagsSize);

/// Type flags that make PyTuple_Check / PyList_Check true (subclasses too).
constexpr uint64_t TupleSubclassFlag = Py_TPFLAGS_TUPLE_SUBCLASS;
constexpr uint64_t ListSubclassFlag = Py_TPFLAGS_LIST_SUBCLASS;
static_assert(TupleSubclassFlag == (1ULL << 26));
static_assert(ListSubclassFlag == (1ULL << 25));

/// PyTupleObject::ob_item: the items are stored inline after the header.
constexpr size_t TupleItemsOffset = 24;
static_assert(offsetof(PyTupleObject, ob_item) == TupleItemsOffset);

/// PyListObject::ob_item: a `PyObject**` to a separately allocated array.
constexpr size_t ListItemsOffset = 24;
static_assert(offsetof(PyListObject, ob_item) == ListItemsOffset);

/// PyDictObject::ma_version_tag (PEP 509), a uint64_t. Meaningful only for
/// an object whose type is a dict type.
constexpr size_t DictVersionTagOffset = 24;
static_assert(offsetof(PyDictObject, ma_version_tag) == DictVersionTagOffset);
static_assert(sizeof(((PyDictObject *)nullptr)->ma_version_tag) == 8);

/// Py_TPFLAGS_MANAGED_DICT: instances keep their __dict__ pointer and their
/// inline-values pointer in the pre-header, before the PyObject
/// (_PyObject_ManagedDictPointer = obj - 3 words, _PyObject_ValuesPointer =
/// obj - 4 words in 3.11's internal/pycore_object.h, which C++ cannot
/// include; tests/unit/Runtime checks both offsets on live objects).
constexpr uint64_t ManagedDictFlag = Py_TPFLAGS_MANAGED_DICT;
static_assert(ManagedDictFlag == (1ULL << 4));
constexpr int64_t ManagedDictOffset = -3 * int64_t(PointerSize);
constexpr int64_t ManagedValuesOffset = -4 * int64_t(PointerSize);

/// Module objects (`PyModuleObject`, internal in 3.11): `md_dict` follows the
/// header and is the module's `tp_dictoffset`; checked on live objects by
/// tests/unit/Runtime.
constexpr size_t ModuleDictOffset = 16;

/// tuple_iterator objects (`_PyTupleIterObject`, private to
/// Objects/tupleobject.c in 3.11; torch's guards.cpp copies the same struct).
/// `it_seq` is NULL once the iterator is exhausted. Checked on live objects
/// by tests/unit/Runtime.
struct TupleIterLayout {
  PyObject_HEAD
  Py_ssize_t it_index;
  PyTupleObject *it_seq;
};

/// range_iterator objects (`rangeiterobject` of Objects/rangeobject.c in
/// 3.11, copied by torch as `_PyRangeIterObject`): the next value is
/// start + index * step, `len` is the total count. C longs (64-bit on LP64).
struct RangeIterLayout {
  PyObject_HEAD
  long index;
  long start;
  long step;
  long len;
};
static_assert(sizeof(long) == 8, "LP64 only");

} // namespace guardjit::abi

#endif // GUARDJIT_RUNTIME_CPYTHONABI_H
