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

/// torch::dynamo::LocalState::apply(Keys).raw_repr() for a LocalState given
/// by its pickled fields (torch 2.14's `LocalState.__getstate__()`: included,
/// excluded and override dispatch-key sets as raw bits, and whether the
/// Python keys are masked), with c10::DispatchKeySet's own operators.
uint64_t applyLocalState(uint64_t Keys, uint64_t Included, uint64_t Excluded,
                         uint64_t Override, bool MaskPythonKeys);

} // namespace guardjit

#endif // GUARDJIT_PYTHON_TENSORFIELDS_H
