//===- TorchLogImporter.h - Guard IR from TORCH_LOGS=guards output -*- C++ -*-===//
//
// Reads the guard trees Dynamo prints with `TORCH_LOGS=guards` (torch 2.13,
// GuardManagerWrapper.__str__ in torch/_dynamo/guards.py) into Guard IR, one
// guard set per `TREE_GUARD_MANAGER:` dump, named after the dump's frame id
// (`0/0`, `2/0_1`; `tree_N` when the lines carry no log prefix). The trees may
// be interleaved with other log lines and carry glog prefixes such as
// `V1129 12:00:00.000000 123 torch/_dynamo/guards.py:4483] [0/0] [__guards] `.
//
// The log is a description, not a serialization: object identities (the ids
// of ID_MATCH objects, callables of lambda guards, the globals dict, the
// torch-function mode stack) and the size a DictGuardManager checks are not
// in it. Each such construct gets a located warning, and is kept in a form
// the verifier accepts: unbound objects described by their text (like any
// parsed set), and constructs the IR has no kind for (unknown accessors and
// leaf guards, unreadable guard text) as opaque `lambda` accessors / guards
// whose callable is described by the log text. The verbose code of every
// guard is kept. Mapping and limits: docs/gir-format.md, "Importing
// TORCH_LOGS=guards output".
//
// Diagnostics go through llvm::SourceMgr as `file:line:col: warning|error:`.
// Malformed trees (bad indentation, garbage lines, a truncated dump) are
// errors; the importer stops at the first one.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_IMPORT_TORCHLOGIMPORTER_H
#define GUARDJIT_IMPORT_TORCHLOGIMPORTER_H

#include "guardjit/IR/Parser.h"

#include <optional>
#include <vector>

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace guardjit {

/// Imports every guard tree in buffer `BufferId` of `SM`, in log order.
/// Warnings and the first error go through `SM` (its diagnostic handler, if
/// set); returns nullopt after an error. The locations in each result point
/// into the log, so the verifier (IR/Verifier.h) reports at log lines. A log
/// without guard trees gives an empty vector.
std::optional<std::vector<ParsedGuardSet>> importTorchLog(llvm::SourceMgr &SM,
                                                          unsigned BufferId);

} // namespace guardjit

#endif // GUARDJIT_IMPORT_TORCHLOGIMPORTER_H
