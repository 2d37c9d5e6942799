//===- PythonText.h - Scanning the Python text of guard lines ---*- C++ -*-===//
//
// Dynamo's verbose code parts are Python expressions (with reprs of
// constants in them) followed by a `  # user line  # file:line in fn`
// comment. These helpers split them while respecting string literals and
// brackets, so that a constant such as `'a  # b'` or `(1, 2)` stays whole.
// They never fail: unbalanced text just yields fewer pieces.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_LIB_IMPORT_PYTHONTEXT_H
#define GUARDJIT_LIB_IMPORT_PYTHONTEXT_H

#include "guardjit/IR/GuardSet.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace guardjit::pytext {

/// Splits a verbose code part into the code and the comment after the first
/// `  # ` outside string literals (get_verbose_code_part pads the code to 60
/// columns, then writes `  # `). The code is right-trimmed; the comment
/// (without `  # `) is empty when there is none.
std::pair<llvm::StringRef, llvm::StringRef> splitComment(llvm::StringRef Part);

/// Splits `S` at the commas that are outside brackets and string literals;
/// pieces are trimmed.
llvm::SmallVector<llvm::StringRef, 8> splitArgs(llvm::StringRef S);

/// For `Prefix(ARGS)` + optional tail returns ARGS and the tail after the
/// matching `)`; nullopt when `S` does not start with `Prefix(` or the
/// parenthesis is not closed.
std::optional<std::pair<llvm::StringRef, llvm::StringRef>>
callArgs(llvm::StringRef S, llvm::StringRef Prefix);

/// Splits `S` at the first ` Op ` (an operator word or symbol with a space
/// on each side, e.g. "is") outside brackets and string literals: `L['a is
/// b'] is L['c']` splits once, after `']`. The sides are trimmed; nullopt
/// when there is no such operator or a side is empty.
std::optional<std::pair<llvm::StringRef, llvm::StringRef>>
splitOperator(llvm::StringRef S, llvm::StringRef Op);

/// The value of a plain Python str repr ('abc' or "abc", no backslash), or
/// nullopt.
std::optional<llvm::StringRef> plainStr(llvm::StringRef Repr);

/// The user's source location out of a verbose comment: the last
/// `<file>:<line> in <function>` in it (format_frame in
/// torch/utils/_traceback.py). Empty when there is none.
UserLoc userLoc(llvm::StringRef Comment);

} // namespace guardjit::pytext

#endif // GUARDJIT_LIB_IMPORT_PYTHONTEXT_H
