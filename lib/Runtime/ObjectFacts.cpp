//===- ObjectFacts.cpp - What live objects prove about guards -------------===//
#include "guardjit/Runtime/ObjectFacts.h"

#include "guardjit/Runtime/Python.h"

using namespace guardjit;

uintptr_t guardjit::fixedTypeOf(uintptr_t Address) {
  if (!Address)
    return 0;
  PyTypeObject *T = Py_TYPE(reinterpret_cast<PyObject *>(Address));
  if (!PyType_HasFeature(T, Py_TPFLAGS_IMMUTABLETYPE) ||
      PyType_IsSubtype(T, &PyModule_Type))
    return 0;
  return reinterpret_cast<uintptr_t>(T);
}

uintptr_t guardjit::noneAddress() {
  return reinterpret_cast<uintptr_t>(Py_None);
}
uintptr_t guardjit::trueAddress() {
  return reinterpret_cast<uintptr_t>(Py_True);
}
uintptr_t guardjit::falseAddress() {
  return reinterpret_cast<uintptr_t>(Py_False);
}
