//===- Parser.h - Reads the .gir text format --------------------*- C++ -*-===//
//
// Parses exactly what IR/Printer.h prints (docs/gir-format.md): one or more
// `guard_set` blocks per buffer, and `code_object` blocks holding the units
// of one code object in cache order; `//` comments and blank lines anywhere.
// Ids in the text are the ids of the IR (`%3` is value 3), so definitions
// must come in order; references are not checked here but by the verifier
// (IR/Verifier.h), which points at the locations the parser records.
//
// Diagnostics go through llvm::SourceMgr as `file:line:col: error: message`.
// The parser stops at the first error.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_IR_PARSER_H
#define GUARDJIT_IR_PARSER_H

#include "guardjit/IR/GuardSet.h"
#include "guardjit/IR/Printer.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/SMLoc.h"

#include <optional>
#include <vector>

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace guardjit {

/// Where one parsed entity (object, tensor spec, value or guard) is, and the
/// references in it the verifier may complain about. Unset locations fall
/// back to the entity's start.
struct EntityLoc {
  llvm::SMLoc Start;
  /// The parent of a value; the operands of a guard, in order.
  llvm::SmallVector<llvm::SMLoc, 1> Operands;
  llvm::SMLoc Object; ///< key=#N of a value, object=#N of a guard, pytype=#N
  llvm::SMLoc Aux;    ///< aux=#N of a guard
  llvm::SMLoc Tensor; ///< tensor=N of a guard
  llvm::SMLoc Origin; ///< origin=N of a guard or a value
  /// Each node of a shape expression (`(` or the literal), by node index.
  std::vector<llvm::SMLoc> ExprNodes;

  llvm::SMLoc at(llvm::SMLoc L) const { return L.isValid() ? L : Start; }
  llvm::SMLoc operand(size_t I) const {
    return I < Operands.size() ? at(Operands[I]) : Start;
  }
};

/// Locations of every entity of one parsed guard set, indexed like the IR.
struct GuardSetLocs {
  llvm::SMLoc Set; ///< the `guard_set` keyword
  std::vector<EntityLoc> Objects, TensorSpecs, Origins, Values, Guards;
};

struct ParsedGuardSet {
  GuardSet Set;
  GuardSetLocs Locs;
  /// Index of the `code_object` block holding the set (InvalidId: a lone
  /// set).
  uint32_t CodeObject = InvalidId;
};

/// A `code_object "name" { ... }` block: the compile units of one code object
/// in cache order (front first). Its guard sets are parsed into the same list
/// as the lone ones, in file order.
struct ParsedCodeObject {
  std::string Name;
  llvm::SMLoc Loc; ///< the `code_object` keyword
  /// Per unit, in order: the index of its set in the parse result, or
  /// InvalidId for an `opaque` unit (guard set unknown).
  std::vector<uint32_t> Units;
  /// Number of sets parsed before the block (to print lone sets and code
  /// objects back in file order).
  size_t SetsBefore = 0;
};

/// The optional `gir torch=".." guardjit=".."` line at the top of a file.
struct ParsedGirHeader {
  GirHeader Versions;
  llvm::SMLoc Loc; ///< the `gir` keyword
};

/// Parses every guard set in buffer `BufferId` of `SM`. Reports the first
/// error through `SM` (its diagnostic handler, if set) and returns nullopt.
/// The result is not verified. `code_object` blocks are accepted only when
/// `CodeObjects` is given (it receives them, in file order); otherwise they
/// are an error, for hosts that handle lone sets only. The version header is
/// accepted (once, before the first set) whether or not `Header` is given;
/// `Header` receives it, or nullopt for a file without one.
std::optional<std::vector<ParsedGuardSet>>
parseGir(llvm::SourceMgr &SM, unsigned BufferId,
         std::vector<ParsedCodeObject> *CodeObjects = nullptr,
         std::optional<ParsedGirHeader> *Header = nullptr);

/// Parses and verifies `Text` (called `BufferName` in messages): for hosts
/// (Python, the embedding API) that want an Error carrying the diagnostics.
/// `Header`, if given, receives the version header (nullopt: none).
llvm::Expected<std::vector<GuardSet>>
parseGirString(llvm::StringRef Text, llvm::StringRef BufferName = "<string>",
               std::optional<GirHeader> *Header = nullptr);

/// Parses one shape expression in its .gir spelling (e.g. `(le 2 (int $0))`)
/// into post-order nodes, for hosts that build IR programmatically (the
/// recorder). Syntax errors carry `<expr>:1:col`; the result is not
/// type-checked (verify the guard that owns it).
llvm::Expected<ShapeExpr> parseShapeExprString(llvm::StringRef Text);

} // namespace guardjit

#endif // GUARDJIT_IR_PARSER_H
