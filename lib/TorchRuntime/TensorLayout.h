//===- TensorLayout.h - TensorImpl offsets, inline TENSOR_MATCH -*- C++ -*-===//
//
// Private to lib/TorchRuntime. See TensorLayout in TorchHooks.h.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_LIB_TORCHRUNTIME_TENSORLAYOUT_H
#define GUARDJIT_LIB_TORCHRUNTIME_TENSORLAYOUT_H

#include "guardjit/Runtime/TorchHooks.h"

namespace guardjit {

/// Takes the offsets from torch's headers and checks them on probe tensors
/// against torch's accessors. Call with the GIL held, after `import torch`;
/// the result is computed once. GUARDJIT_POISON_TENSOR_LAYOUT=<field> (a
/// test hook) moves one offset before the check, which must then fail.
const TensorLayout &verifiedTensorLayout();

} // namespace guardjit

#endif // GUARDJIT_LIB_TORCHRUNTIME_TENSORLAYOUT_H
