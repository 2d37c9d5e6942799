//===- Order.h - cost-model ordering ---------------------------------------------===//
//
// `order`: reorders guards so that cheap and likely-to-fail guards run
// first: pure guards are sorted by estimated cost / failure likelihood;
// guards that may run Python code (lambdas, EQUALS_MATCH/LENGTH_CHECK/
// DICT_CONTAINS/NO_HASATTR/DIMENSION_DYNAMIC_MARKING, or any guard whose
// value is read through getattr, get_item, a lambda or a call) follow, in
// their original relative order; epilogue lambdas stay last (the
// interpreter and the JIT run them last anyway).
//
// Soundness: the answer is a conjunction of guards and reads, and GuardSet.h
// defines it as independent of order (docs/guard-semantics.md §2: torch
// itself re-sorts accessors by fail count between calls, "never the
// result"). Keeping Python-running guards in their original order keeps
// the order of their observable side effects; the pure guards moved ahead
// of them run no Python code. No guard or read is added or removed.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TRANSFORMS_ORDER_H
#define GUARDJIT_TRANSFORMS_ORDER_H

#include "guardjit/Transforms/Pass.h"

namespace guardjit {

class OrderPass : public Pass {
public:
  static constexpr llvm::StringLiteral Name = "order";
  llvm::StringRef name() const override { return Name; }
  void run(GuardSet &S, const PassContext &Ctx) override;
};

} // namespace guardjit

#endif // GUARDJIT_TRANSFORMS_ORDER_H
