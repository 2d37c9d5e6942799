//===- TensorFields.cpp - Compile-time fields of a TENSOR_MATCH -----------===//
#include "TensorFields.h"

#include <torch/csrc/autograd/python_variable.h>

namespace guardjit {

bool readTensorFields(PyObject *Tensor, TensorFields *Out) {
  if (!THPVariable_Check(Tensor))
    return false;
  const at::Tensor &T = THPVariable_Unpack(Tensor);
  // Mirrors TensorCheck::TensorCheck (torch/csrc/dynamo/guards.cpp).
  Out->DType = static_cast<int8_t>(T.dtype().toScalarType());
  Out->DeviceIndex = static_cast<int8_t>(T.device().index());
  Out->RequiresGrad = T.requires_grad();
  return true;
}

uint64_t applyLocalState(uint64_t Keys, uint64_t Included, uint64_t Excluded,
                         uint64_t Override, bool MaskPythonKeys) {
  // Mirrors LocalState::apply (torch/csrc/dynamo/guards.h).
  using c10::DispatchKeySet;
  DispatchKeySet OverrideSet(DispatchKeySet::RAW, Override);
  if (!OverrideSet.empty())
    return OverrideSet.raw_repr();
  DispatchKeySet Result = (DispatchKeySet(DispatchKeySet::RAW, Keys) |
                           DispatchKeySet(DispatchKeySet::RAW, Included)) -
                          DispatchKeySet(DispatchKeySet::RAW, Excluded);
  if (MaskPythonKeys)
    Result = Result - DispatchKeySet({c10::DispatchKey::Python,
                                      c10::DispatchKey::PythonTLSSnapshot,
                                      c10::DispatchKey::PythonDispatcher});
  return Result.raw_repr();
}

} // namespace guardjit
