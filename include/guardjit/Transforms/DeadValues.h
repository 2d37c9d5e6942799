//===- DeadValues.h - dead-accessor elimination ---------------------------------------------===//
//
// `dead-values`: removes a value that no guard reads and that has no live
// child, when its read cannot fail once its parent was read.
//
// Soundness: a read that fails (NULL or an exception) makes the whole check
// fail, in Dynamo (GuardAccessor::check_nopybind) and in the interpreter; a
// manager with no leaf guards and no accessors is still read, and Dynamo
// creates exactly such managers for `hasattr` guards. So an unguarded read is
// a check of its own and is kept unless it cannot fail: `type` (Py_TYPE),
// `globals` (the captured dict, the input is ignored), and `type_dict` /
// `type_mro` of a `type` value (a type returned by Py_TYPE is ready, so its
// tp_dict and tp_mro are set). Removing such a read changes no answer and no
// Python code runs in it.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TRANSFORMS_DEADVALUES_H
#define GUARDJIT_TRANSFORMS_DEADVALUES_H

#include "guardjit/Transforms/Pass.h"

namespace guardjit {

class DeadValuesPass : public Pass {
public:
  static constexpr llvm::StringLiteral Name = "dead-values";
  llvm::StringRef name() const override { return Name; }
  void run(GuardSet &S, const PassContext &Ctx) override;
};

} // namespace guardjit

#endif // GUARDJIT_TRANSFORMS_DEADVALUES_H
