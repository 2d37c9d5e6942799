//===- TorchForwarding.cpp - Torch guards forwarded to TorchHooks ---------===//
//
// The helpers of the guards and accessors that need ATen (TENSOR_MATCH,
// GLOBAL_STATE, TORCH_FUNCTION_MODE_STACK, the local-state read,
// GradGuardAccessor, COW_TENSOR_MATCH, AUTOGRAD_SAVED_TENSORS_HOOKS,
// STORAGE_OVERLAPPING): each forwards to the installed TorchHooks
// (TorchHooks.h), which the torch component provides, and fails when none
// is installed. The Runtime library itself links no torch.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/RuntimeHelpers.h"

#include "guardjit/Runtime/TorchHooks.h"

using namespace guardjit;

extern "C" void gj_rt_read_local_state(LocalState *State) {
  if (const TorchHooks *H = torchHooks())
    H->readLocalState(State);
  else
    *State = LocalState();
}

extern "C" int gj_rt_tensor_match(PyObject *Value, const void *Payload,
                                  const LocalState *State) {
  const TorchHooks *H = torchHooks();
  return H && Payload ? H->tensorMatch(Value, Payload, State) : 0;
}

extern "C" int gj_rt_global_state(const void *Payload) {
  const TorchHooks *H = torchHooks();
  return H && Payload ? H->globalState(Payload) : 0;
}

extern "C" int gj_rt_torch_function_mode_stack(const void *Payload) {
  const TorchHooks *H = torchHooks();
  return H && Payload ? H->torchFunctionModeStack(Payload) : 0;
}

extern "C" PyObject *gj_rt_grad(PyObject *Tensor) {
  const TorchHooks *H = torchHooks();
  if (!H || !H->tensorGrad)
    return nullptr;
  PyObject *G = H->tensorGrad(Tensor);
  if (!G && PyErr_Occurred())
    PyErr_Clear();
  return G;
}

extern "C" int gj_rt_cow_tensor_match(PyObject *Value, int64_t Expected) {
  const TorchHooks *H = torchHooks();
  if (!H || !H->cowTensorMatch)
    return 0;
  int R = H->cowTensorMatch(Value, Expected != 0);
  if (PyErr_Occurred())
    PyErr_Clear();
  return R == 1;
}

extern "C" int gj_rt_saved_tensors_hooks(PyObject *GraphModule,
                                         int64_t HasIds, int64_t PackId,
                                         int64_t UnpackId) {
  const TorchHooks *H = torchHooks();
  if (!H || !H->savedTensorsHooks)
    return 0;
  int R = H->savedTensorsHooks(GraphModule, HasIds != 0, PackId, UnpackId);
  if (PyErr_Occurred())
    PyErr_Clear();
  return R;
}

extern "C" int gj_rt_storage_overlapping(PyObject *const *Tensors, size_t N,
                                         size_t NumOverlapping) {
  const TorchHooks *H = torchHooks();
  if (!H || !H->storageOverlapping || NumOverlapping > N)
    return 0;
  int R = H->storageOverlapping(Tensors, N, NumOverlapping);
  if (PyErr_Occurred())
    PyErr_Clear();
  return R;
}
