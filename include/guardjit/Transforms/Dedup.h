//===- Dedup.h - duplicate-guard elimination ---------------------------------------------===//
//
// `dedup`: removes a guard equal to an earlier one: same kind, same operand
// values (in order), same object / aux / int / str, equal TENSOR_MATCH
// parameters; the origin is not compared (copies of one check that differ
// only in their Dynamo guard are duplicates once the filters have run).
//
// Soundness: the check is a conjunction, so `g && g` == `g` provided the
// second evaluation of `g` answers as the first. Operands are the same
// values, read once per call, so both see the same objects. The assumption
// is the one the whole IR makes (GuardSet.h: "order never changes the
// answer", which torch's own fail-count re-sorting of accessors relies on):
// checking a guard does not change what another guard sees. Python lambda
// guards (LAMBDA_GUARD and epilogue lambdas) are never merged: they are user
// code, torch never de-duplicates them, and the number of calls is
// observable.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TRANSFORMS_DEDUP_H
#define GUARDJIT_TRANSFORMS_DEDUP_H

#include "guardjit/Transforms/Pass.h"

namespace guardjit {

class DedupPass : public Pass {
public:
  static constexpr llvm::StringLiteral Name = "dedup";
  llvm::StringRef name() const override { return Name; }
  void run(GuardSet &S, const PassContext &Ctx) override;
};

} // namespace guardjit

#endif // GUARDJIT_TRANSFORMS_DEDUP_H
