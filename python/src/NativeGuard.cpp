//===- NativeGuard.cpp - The callable Dynamo's root guard invokes ---------===//
#include "NativeGuard.h"

namespace guardjit {
namespace {

// The PyCFunction's self: a minimal object owning the target.
struct HolderObject {
  PyObject_HEAD std::shared_ptr<CheckTarget> *Target;
};

void holderDealloc(PyObject *Self) {
  auto *H = reinterpret_cast<HolderObject *>(Self);
  delete H->Target;
  H->Target = nullptr;
  PyTypeObject *Tp = Py_TYPE(Self);
  Tp->tp_free(Self);
  Py_DECREF(Tp);
}

PyType_Slot HolderSlots[] = {{Py_tp_dealloc, (void *)holderDealloc},
                             {0, nullptr}};
PyType_Spec HolderSpec = {"guardjit._core.CheckTargetHolder",
                          sizeof(HolderObject), 0, Py_TPFLAGS_DEFAULT,
                          HolderSlots};
PyTypeObject *HolderType = nullptr;

// METH_O: Dynamo's LAMBDA_GUARD calls this with the frame locals dict and
// treats a true result as a pass.
// The holder is kept alive for the call (one non-atomic increment, under the
// GIL): a guard that calls Python may let another thread run, and if that
// thread drops the last reference to the root (torch._dynamo.reset(), an
// eviction), the target, its bound set and the code running now must
// outlive this call; they go with the final Py_DECREF, after it returned.
PyObject *callGuard(PyObject *Self, PyObject *FrameLocals) {
  Py_INCREF(Self);
  int Ok = guardjit::callCheck(**reinterpret_cast<HolderObject *>(Self)->Target,
                              FrameLocals);
  Py_DECREF(Self);
  return Py_NewRef(Ok ? Py_True : Py_False);
}

PyMethodDef CheckDef = {"guardjit_check", callGuard, METH_O,
                        "guardjit's check of one compile unit's guards."};

} // namespace

PyObject *makeNativeGuard(std::shared_ptr<CheckTarget> Target) {
  if (!HolderType) {
    HolderType = reinterpret_cast<PyTypeObject *>(PyType_FromSpec(&HolderSpec));
    if (!HolderType)
      return nullptr;
  }
  auto *H = PyObject_New(HolderObject, HolderType);
  if (!H)
    return nullptr;
  H->Target = new std::shared_ptr<CheckTarget>(std::move(Target));
  PyObject *Fn = PyCFunction_New(&CheckDef, reinterpret_cast<PyObject *>(H));
  Py_DECREF(H);
  return Fn;
}

std::shared_ptr<CheckTarget> nativeGuardTarget(PyObject *Callable) {
  if (!PyCFunction_Check(Callable) ||
      PyCFunction_GET_FUNCTION(Callable) != callGuard)
    return nullptr;
  PyObject *Self = PyCFunction_GET_SELF(Callable);
  return *reinterpret_cast<HolderObject *>(Self)->Target;
}

} // namespace guardjit
