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

} // namespace guardjit
