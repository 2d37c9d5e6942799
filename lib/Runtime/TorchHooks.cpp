//===- TorchHooks.cpp - Torch-specific checks behind a C table ------------===//
#include "guardjit/Runtime/TorchHooks.h"

#include <atomic>

namespace guardjit {

// Atomic because the JIT may compile (and read the table) off the calling
// thread; acquire/release makes a table filled before installation visible.
static std::atomic<const TorchHooks *> InstalledHooks{nullptr};

void setTorchHooks(const TorchHooks *Hooks) {
  InstalledHooks.store(Hooks, std::memory_order_release);
}

const TorchHooks *torchHooks() {
  return InstalledHooks.load(std::memory_order_acquire);
}

} // namespace guardjit
