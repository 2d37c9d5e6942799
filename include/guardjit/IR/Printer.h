//===- Printer.h - Textual form (.gir) of Guard IR --------------*- C++ -*-===//
//
// Prints a GuardSet in the .gir text format (docs/gir-format.md):
//
//   guard_set "forward_0" {
//     object #0 = type "<class 'torch.Tensor'>"
//     object #1 = key strong "'x'"
//     tensor 0 = pytype=#0 keys=0x8001 dtype=6 device=-1 requires_grad=false sizes=[2, ?] strides=[8, 1]
//     %0 = root source="L"
//     %1 = frame_local %0 name="x" index=1 key=#1 source="L['x']"
//     guard tensor_match %1 tensor=0 source="L['x']" loc="model.py":35
//   }
//
// Addresses of bound objects are not printed: text is independent of the
// process, so printed IR is stable and diffable. The parser (IR/Parser.h)
// reads exactly this text back: print(parse(print(S))) == print(S).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_IR_PRINTER_H
#define GUARDJIT_IR_PRINTER_H

#include "guardjit/IR/GuardSet.h"

#include <string>
#include <vector>

namespace guardjit {

/// The versions a .gir file was recorded with: its optional first entity,
/// `gir torch="2.13.0+cpu" guardjit="0.1.0"` (docs/gir-format.md). Hosts
/// that load saved sets (guardjit.h) refuse a file from another torch or
/// guardjit unless told otherwise; guard-ir-opt only carries it through.
struct GirHeader {
  std::string Torch;    ///< torch.__version__ at recording time
  std::string Guardjit; ///< guardjit's version (GUARDJIT_VERSION)
};

/// Returns the header line (ending in a newline) of a file recorded with
/// `H`'s versions.
std::string printGirHeader(const GirHeader &H);

/// Returns the .gir text of `Set`.
std::string printGuardSet(const GuardSet &Set);

/// Returns the .gir text of a file holding `Sets`, separated by blank lines.
std::string printGuardSets(const std::vector<GuardSet> &Sets);

/// Returns the .gir text of one code object's compile units in cache order
/// (front first): a `code_object "<name>" { ... }` block holding each unit's
/// `guard_set`, or `opaque` for a nullptr unit (guard set unknown), separated
/// by blank lines.
std::string printCodeObject(std::string_view Name,
                            const std::vector<const GuardSet *> &Units);

/// Quotes `S` as a .gir string literal (escapes `"`, `\` and control chars).
std::string quoteString(std::string_view S);

} // namespace guardjit

#endif // GUARDJIT_IR_PRINTER_H
