//===- TensorFields.h - Compile-time fields of a TENSOR_MATCH ---*- C++ -*-===//
#ifndef GUARDJIT_PYTHON_TENSORFIELDS_H
#define GUARDJIT_PYTHON_TENSORFIELDS_H

#include "guardjit/Runtime/Python.h"

#include <cstdint>

namespace guardjit {

/// The fields torch::dynamo::TensorCheck's constructor reads from the example
/// tensor: dtype (c10::ScalarType), device index and requires_grad.
struct TensorFields {
  int8_t DType = 0;
  int8_t DeviceIndex = -1;
  bool RequiresGrad = false;
};

/// Reads the fields of `Tensor` (borrowed). Returns false if it is not a
/// torch.Tensor. GIL held.
bool readTensorFields(PyObject *Tensor, TensorFields *Out);

} // namespace guardjit

#endif // GUARDJIT_PYTHON_TENSORFIELDS_H
