//===- TorchRuntime.h - TorchHooks implemented against ATen -----*- C++ -*-===//
//
// Implements the TorchHooks table (TENSOR_MATCH, GLOBAL_STATE,
// TORCH_FUNCTION_MODE_STACK, the TLS dispatch key state) with the C++ API of
// the torch this component was compiled against (torch 2.13.0), mirroring
// torch::dynamo::TensorCheck and GlobalStateGuard in
// torch/csrc/dynamo/guards.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TORCHRUNTIME_TORCHRUNTIME_H
#define GUARDJIT_TORCHRUNTIME_TORCHRUNTIME_H

namespace guardjit {

/// Installs the ATen-backed TorchHooks. Call once, with the GIL held, after
/// `import torch` (the torch libraries must be loaded). Idempotent.
void installTorchRuntime();

} // namespace guardjit

#endif // GUARDJIT_TORCHRUNTIME_TORCHRUNTIME_H
