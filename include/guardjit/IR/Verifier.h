//===- Verifier.h - Structural checks of Guard IR ---------------*- C++ -*-===//
//
// Checks what the interpreter, binding and lowering assume of a GuardSet:
// every reference is defined, parents precede children, each guard kind has
// its operand count and the fields it reads, and referenced objects are of a
// plausible kind (a TYPE_MATCH compares with a type object, a lambda calls a
// callable). Runs after parsing and, in debug builds, after each pass.
//
// Three entry points share one set of checks: a callback (for tools), an
// llvm::Error (for programmatically built IR) and SourceMgr diagnostics at the
// locations the parser recorded (for .gir files).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_IR_VERIFIER_H
#define GUARDJIT_IR_VERIFIER_H

#include "guardjit/IR/GuardSet.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <string>

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace guardjit {

struct GuardSetLocs;

/// One problem the verifier found, and what it is about.
struct VerifierDiagnostic {
  enum EntityKind { Set, Object, TensorSpec, Value, Guard };
  /// The part of the entity at fault, for pointing at it in the text.
  enum FieldKind { Whole, Operand, ObjectRef, AuxRef, TensorRef, OriginRef };
  EntityKind Entity = Set;
  uint32_t Index = 0;        ///< id of the entity (guard index for guards)
  FieldKind Field = Whole;
  uint32_t OperandIndex = 0; ///< for Field == Operand (the parent of a value)
  std::string Message;       ///< lower case, no final period
};

/// Checks `S`, calling `Report` once per problem. Returns true when `S` is
/// well formed.
bool verifyGuardSet(const GuardSet &S,
                    llvm::function_ref<void(const VerifierDiagnostic &)> Report);

/// Checks `S`; the error lists every problem, one per line, e.g.
/// "guard set 'unit': guard 3 (type_match): use of undefined value %7".
llvm::Error verifyGuardSet(const GuardSet &S);

/// Checks a parsed `S`, reporting each problem through `SM` at its location
/// in `Locs` (`file:line:col: error: ...`). Returns true when well formed.
bool verifyGuardSet(const GuardSet &S, const GuardSetLocs &Locs,
                    llvm::SourceMgr &SM);

} // namespace guardjit

#endif // GUARDJIT_IR_VERIFIER_H
