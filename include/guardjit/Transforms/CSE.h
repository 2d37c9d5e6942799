//===- CSE.h - common accessor chains ---------------------------------------------===//
//
// `cse`: merges two values read by the same accessor kind from the same
// parent with the same name / index / key, so each object is read once per
// call; uses of the later value (guard operands, children) are rewritten to
// the earlier one. Parents are merged first, so whole chains are shared.
//
// Keys are equal when they are the same table entry, the same live object
// (equal non-zero addresses), or, in parsed IR, entries of the same kind
// whose repr is a Python str or int literal (which determines the key).
//
// Soundness: merged accessors are those whose read returns the same object
// every time it is done on the same parent in one call and runs no Python
// code: frame_local, globals, dict_get_item, generic_dict, code, type,
// tuple/list_get_item, dict_key/dict_value, closure, func_defaults,
// func_kwdefaults, type_dict, type_mro, weakref_call, global_weakref. So
// the merged value is the object each original read returned, and every
// guard sees what it saw before. getattr / generic_getattr (descriptors),
// get_item (__getitem__), lambda and call_function_no_args may return a new
// object per read or run code, and are never merged.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TRANSFORMS_CSE_H
#define GUARDJIT_TRANSFORMS_CSE_H

#include "guardjit/Transforms/Pass.h"

namespace guardjit {

class CSEPass : public Pass {
public:
  static constexpr llvm::StringLiteral Name = "cse";
  llvm::StringRef name() const override { return Name; }
  void run(GuardSet &S, const PassContext &Ctx) override;
};

} // namespace guardjit

#endif // GUARDJIT_TRANSFORMS_CSE_H
