//===- CodeProvider.h - What a check target asks of a code generator ------===//
//
// The provider-neutral side of native code, as PostgreSQL's jit.h is to
// llvmjit: lib/Check decides when a check is compiled, swapped, verified and
// freed; a CodeProvider only compiles one bound set at its level and hands
// back the function with an opaque owner of its code. The LLVM provider is
// Check/LLVMProvider.h (lib/Check/LLVM); no LLVM type appears here.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_CHECK_CODEPROVIDER_H
#define GUARDJIT_CHECK_CODEPROVIDER_H

#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"

#include <cstddef>
#include <memory>
#include <string>

namespace guardjit {

/// What one compile cost and produced (a provider fills what it knows).
struct CodeStats {
  double LowerMs = 0;   ///< IR -> the provider's IR (ms)
  double CompileMs = 0; ///< the provider's IR -> machine code (ms)
  size_t NumGuards = 0;
  size_t NumInlined = 0; ///< guards emitted inline
  size_t NumHelpers = 0; ///< guards emitted as runtime helper calls
  bool CacheHit = false; ///< the code came from an on-disk cache
  double CacheMs = 0;    ///< time in that cache (ms)
};

/// The native code of one bound set: its function and whatever keeps it
/// alive. Destroying it frees the code; it must not be destroyed while a
/// thread runs function() (lib/Check's retirement ensures that).
class CheckCode {
public:
  virtual ~CheckCode();
  /// The check; valid while this object lives. Call with the GIL held.
  virtual CheckFn function() const = 0;
  /// The level of the provider that compiled it (higher: better code).
  virtual int level() const = 0;
  virtual CodeStats stats() const = 0;
};

/// Compiles bound sets at one level. compile() may run on lib/Check's
/// background thread: it reads only the set's bound addresses, never a
/// Python object, and never takes the GIL.
class CodeProvider {
public:
  virtual ~CodeProvider();
  /// This provider's level; lib/Check only compares levels.
  virtual int level() const = 0;
  /// The level's name for messages ("O0", "light", "O1", "O2").
  virtual std::string levelName() const = 0;
  /// The code of `Set`, or null with *Error set. `Set` must outlive the
  /// result. Any thread, no GIL.
  virtual std::shared_ptr<CheckCode> compile(const BoundGuardSet &Set,
                                             std::string *Error) = 0;
};

} // namespace guardjit

#endif // GUARDJIT_CHECK_CODEPROVIDER_H
