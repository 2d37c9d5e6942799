//===- Rewrite.h - Shared IR edits of the passes ----------------*- C++ -*-===//
//
// Removal and renumbering of guards and values. Private to Transforms.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_LIB_TRANSFORMS_REWRITE_H
#define GUARDJIT_LIB_TRANSFORMS_REWRITE_H

#include "guardjit/IR/GuardSet.h"

#include <vector>

namespace guardjit {

/// Removes the guards with Dead[I] set, keeping the order of the others.
void eraseGuards(GuardSet &S, const std::vector<bool> &Dead);

/// Rewrites every use of value I (guard operands, parents) to Map[I], then
/// removes the values with Dead[I] and renumbers the rest in order. Dead
/// values must have no remaining use, Map must point to earlier or equal
/// ids, and the root (value 0) is never dead.
void rewriteValues(GuardSet &S, const std::vector<ValueId> &Map,
                   const std::vector<bool> &Dead);

/// Values with at least one guard reading them, and values with a child.
struct ValueUses {
  std::vector<unsigned> GuardUses;
  std::vector<unsigned> Children;
};
ValueUses computeUses(const GuardSet &S);

/// Whether two object table entries certainly denote equal objects (same
/// entry, same live object, or in parsed IR the same str / int literal).
bool sameObject(const GuardSet &S, ObjectId A, ObjectId B);

} // namespace guardjit

#endif // GUARDJIT_LIB_TRANSFORMS_REWRITE_H
