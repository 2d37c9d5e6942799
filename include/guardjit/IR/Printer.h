//===- Printer.h - Textual form (.gir) of Guard IR --------------*- C++ -*-===//
//
// Prints a GuardSet in the .gir text format (docs/gir-format.md):
//
//   guard_set "forward_0" {
//     object #0 = type "<class 'torch.Tensor'>"
//     %1 = frame_local %0 name="x" index=1 key=#3 source="L['x']"
//     guard tensor_match %1 tensor=0 source="L['x']" loc="model.py":35
//   }
//
// Addresses of bound objects are not printed: text is independent of the
// process, so printed IR is stable and diffable.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_IR_PRINTER_H
#define GUARDJIT_IR_PRINTER_H

#include "guardjit/IR/GuardSet.h"

#include <string>

namespace guardjit {

/// Returns the .gir text of `Set`.
std::string printGuardSet(const GuardSet &Set);

/// Quotes `S` as a .gir string literal (escapes `"`, `\` and control chars).
std::string quoteString(std::string_view S);

} // namespace guardjit

#endif // GUARDJIT_IR_PRINTER_H
