//===- FoldImplied.h - implied-guard folding ---------------------------------------------===//
//
// `fold-implied`: removes a guard that another guard on the same value
// implies (when the implying guard passes, the implied one passes too):
//
//  - TENSOR_MATCH => TYPE_MATCH of its own pytype (same table entry or same
//    live object): TensorCheck first tests `Py_TYPE(v) == pytype`.
//  - TENSOR_MATCH => NOT_NONE: it passes only for a tensor.
//  - TRUE_MATCH, FALSE_MATCH => NOT_NONE: `v is True` / `v is False`.
//  - ID_MATCH(o) => EQUALS_MATCH(o) of the same object: EQUALS_MATCH passes
//    on pointer equality before comparing.
//  With live objects (ObjectFacts, bound sets only):
//  - ID_MATCH(o) => TYPE_MATCH(T) when T is o's fixed exact type;
//  - EQUALS_MATCH(c) => TYPE_MATCH(T) when T is c's fixed exact type (it
//    passes on `v is c` or on `type(v) is type(c)` and ==);
//  - NONE_MATCH / TRUE_MATCH / FALSE_MATCH => TYPE_MATCH of the fixed type
//    of None / True / False;
//  - ID_MATCH(o) => NOT_NONE when o is not None.
//  "Fixed" (ObjectFacts::FixedTypeOf): CPython refuses `__class__`
//  assignment for such objects, so `type(o) is T` holds for as long as o
//  lives, and ID_MATCH's entry is invalidated when o dies (as Dynamo does).
//  Without it, ID_MATCH => TYPE_MATCH is not certain: an nn.Module's
//  `__class__` can be reassigned.
//
// Soundness: each rule is an implication between guards on the same value
// (the same object in one call); the kinds form an acyclic order, so the
// implying guards that remain still imply every removed one.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TRANSFORMS_FOLDIMPLIED_H
#define GUARDJIT_TRANSFORMS_FOLDIMPLIED_H

#include "guardjit/Transforms/Pass.h"

namespace guardjit {

class FoldImpliedPass : public Pass {
public:
  static constexpr llvm::StringLiteral Name = "fold-implied";
  llvm::StringRef name() const override { return Name; }
  void run(GuardSet &S, const PassContext &Ctx) override;
};

} // namespace guardjit

#endif // GUARDJIT_TRANSFORMS_FOLDIMPLIED_H
