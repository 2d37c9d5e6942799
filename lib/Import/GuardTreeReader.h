//===- GuardTreeReader.h - Guard trees out of a torch log -------*- C++ -*-===//
//
// The syntax half of the importer: finds each `TREE_GUARD_MANAGER:` dump in a
// log, strips log prefixes, skips interleaved lines of other frames and
// loggers, and splits each tree line (`| | +- <text>`) into a node with its
// depth and parent. What the nodes mean is TorchLogImporter.cpp's business.
//
// The tree is printed by torch/_dynamo/guards.py, GuardManagerWrapper:
// `IndentedBufferWithPrefix` writes `"| " * depth + "+- " + line`, a dump
// starts with an empty line and `TREE_GUARD_MANAGER:` and ends with an empty
// line (the log message is `"GUARDS:\n" + str(wrapper)`).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_LIB_IMPORT_GUARDTREEREADER_H
#define GUARDJIT_LIB_IMPORT_GUARDTREEREADER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SMLoc.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace guardjit {

/// One `+- ...` line of a guard tree.
struct TreeNode {
  enum NodeKind {
    Root,         ///< `RootGuardManager`
    Manager,      ///< `GuardManager: source=..., accessed_by=..., type=...`
    KeyValuePair, ///< `KeyValueManager pair at index=N` (DictGuardManager)
    Leaf,         ///< `TYPE_MATCH: <verbose code part>`, or a bare name
  };
  NodeKind Kind = Leaf;
  unsigned Depth = 0;
  int Parent = -1;     ///< index in GuardTree::Nodes; -1 at depth 0
  llvm::StringRef Text; ///< everything after `+- `
  llvm::SMLoc Loc;      ///< start of Text

  // Manager: `[KeyManager: |ValueManager: ]<Class>: source=S[, accessed_by=A]
  // [, type=T][, tag_safe=(b, b)]`.
  llvm::StringRef Role;  ///< "", "KeyManager" or "ValueManager"
  llvm::StringRef Class; ///< "GuardManager", "DictGuardManager", ...
  llvm::StringRef Source, Accessor, Type;
  llvm::SMLoc AccessorLoc;
  // KeyValuePair
  int64_t Index = 0;
  // Leaf: `NAME: BODY`; a bare `NAME` (empty Body) repeats a relational guard
  // printed earlier in the tree.
  llvm::StringRef GuardName, Body;
  llvm::SMLoc BodyLoc;

  bool isDictManager() const {
    return Kind == Manager && Class.ends_with("DictGuardManager");
  }
};

/// One `TREE_GUARD_MANAGER:` dump. Nodes are in print order (pre-order);
/// Nodes[0] is the root manager, nodes at depth 0 after it are epilogue
/// guards.
struct GuardTree {
  std::string Name; ///< frame id of the log prefix, or "tree_N"
  llvm::SMLoc Loc;  ///< the `TREE_GUARD_MANAGER:` text
  std::vector<TreeNode> Nodes;
};

/// Reads every guard tree of buffer `BufferId`. Reports the first syntax
/// error through `SM` and returns false.
bool readGuardTrees(llvm::SourceMgr &SM, unsigned BufferId,
                    std::vector<GuardTree> &Out);

} // namespace guardjit

#endif // GUARDJIT_LIB_IMPORT_GUARDTREEREADER_H
