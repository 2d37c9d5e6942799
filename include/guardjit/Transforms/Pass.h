//===- Pass.h - Guard IR pass interface -------------------------*- C++ -*-===//
//
// A pass is one class with one `run` over one guard set (or, for a
// MultiSetPass, over the units of one code object), registered by one
// line in Passes.def (LLVM new-pass-manager style, without analyses: guard
// sets are small and every pass recomputes what it needs).
//
// The library has no Python and no llvm::cl types: it is linked into the
// Python module as well as into guard-ir-opt.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TRANSFORMS_PASS_H
#define GUARDJIT_TRANSFORMS_PASS_H

#include "guardjit/IR/GuardSet.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace guardjit {

/// Facts about live objects that some passes may use. Every field is
/// optional: parsed IR (no live objects) leaves them empty and the passes
/// then only use what the IR itself proves.
struct ObjectFacts {
  /// For the address of a live object (ObjectEntry::Address): the address of
  /// its exact type if that type can never change while the object lives,
  /// else 0. In CPython `obj.__class__ = T` is refused when type(obj) has
  /// Py_TPFLAGS_IMMUTABLETYPE and is not a module type (typeobject.c,
  /// object_set_class), so those are the fixed types. Called with the GIL.
  std::function<uintptr_t(uintptr_t Address)> FixedTypeOf;
  /// Addresses of None, True and False (0 when unknown).
  uintptr_t None = 0, True = 0, False = 0;
};

/// What every pass can see besides the set.
struct PassContext {
  ObjectFacts Facts;
};

/// Boolean pass options parsed from `name<opt;no-opt2>`.
using PassParams = std::map<std::string, bool>;

class Pass {
public:
  virtual ~Pass();
  /// The name in Passes.def.
  virtual llvm::StringRef name() const = 0;
  /// Transforms `S` in place. Passes never fail: they only act on IR the
  /// verifier accepted and leave IR it accepts.
  virtual void run(GuardSet &S, const PassContext &Ctx) = 0;
  /// Whether this is one of torch's guard filters (see PassPipeline.h for the
  /// ordering rule between filters and structural passes).
  virtual bool isFilter() const { return false; }
  /// Writes the pass in -passes= syntax (`name` or `name<opt>`).
  virtual void printPipeline(llvm::raw_ostream &OS) const { OS << name(); }
};

/// Named counts of what a multi-set pass did to one unit, in print order
/// (e.g. {"guards_out", 3}).
using PassCounters = std::vector<std::pair<std::string, int64_t>>;

/// A pass over all compile units (cache entries) of one code object at once,
/// registered with GJ_MULTISET_PASS. Such a pass cannot run over a lone set:
/// its answer for one unit depends on the others.
class MultiSetPass {
public:
  virtual ~MultiSetPass();
  virtual llvm::StringRef name() const = 0;
  /// Transforms the units in place. `Units` is in cache order (front first);
  /// std::nullopt is an opaque unit (guard set unknown) and stays so.
  /// Appends one PassCounters per unit to `Counters` if given. Never fails
  /// on IR the verifier accepted, and leaves IR it accepts.
  virtual void run(std::vector<std::optional<GuardSet>> &Units,
                   const PassContext &Ctx,
                   std::vector<PassCounters> *Counters) = 0;
  /// Writes the pass in -passes= syntax (`name` or `name<param>`).
  virtual void printPipeline(llvm::raw_ostream &OS) const { OS << name(); }
};

} // namespace guardjit

#endif // GUARDJIT_TRANSFORMS_PASS_H
