//===- GuardFilters.h - torch's guard filters as passes ---------*- C++ -*-===//
//
// The six `guard_filter_fn`s of torch/compiler/__init__.py (torch 2.13) as
// passes. torch calls the filter once per Dynamo guard (`GuardFilterEntry`,
// built by make_guard_filter_entry in torch/_dynamo/guards.py), then rebuilds
// the guard tree from the kept guards only (CheckFunctionManager.__init__).
// Each pass mirrors that on the IR:
//
//  1. Every guard whose origin (GuardSet::origins()) the filter rejects is
//     removed. Guards without an origin were installed outside any guard's
//     create(); torch's filters never see them, so they stay, except:
//  2. NO_TENSOR_ALIASING: torch collects its operands while it creates the
//     kept TENSOR_MATCH guards and installs it only for more than one
//     tensor (build_guards). Its operands are narrowed to the values whose
//     TENSOR_MATCH survived; with one or none left it is removed.
//  3. The object-aliasing epilogue lambda (`x is y`, installed in
//     build_guards from the DUPLICATE_INPUT guards' code parts) carries the
//     origin of the first DUPLICATE_INPUT guard (recorder.py), so step 1
//     decides it. Without an origin (hand-written IR) it is removed when the
//     filter rejects every DUPLICATE_INPUT guard whatever its fields
//     (keep_tensor, keep_portable, skip_all) and stays otherwise: a
//     stricter check than torch's, never a looser one.
//  4. Values: torch creates a manager only for a kept guard's source. A
//     value stays when a kept guard reads it or it has a kept child (the
//     type and size checks a DictGuardManager makes of itself, origin-less,
//     do not keep it), or when the filter keeps its origin (the Dynamo
//     guard whose create() made it, Value::Origin: torch's rebuild runs that
//     create() again, e.g. a HASATTR guard's accessor, which has no guard).
//     A value with neither that had no guard and no child before is a
//     HASATTR accessor without a recorded origin (hand-written IR): it goes
//     when the filter rejects HASATTR whatever its fields, or
//     (skip_guard_on_globals) when its chain starts at the globals;
//     otherwise it stays.
//     The recorder writes path guards (a DictGuardManager's own type and
//     size checks, the EQUALS_MATCH GuardBuilder puts on a dict key while
//     walking to the value at that index) without an origin: they do not
//     keep their value and go with it; a dict key's value stays with the
//     dict value of the same index.
//
// These passes are unsafe by design (they drop guards) and must run before
// any structural pass (PassPipeline.h).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TRANSFORMS_GUARDFILTERS_H
#define GUARDJIT_TRANSFORMS_GUARDFILTERS_H

#include "guardjit/Transforms/Pass.h"

namespace guardjit {

/// The common part: steps 1-4 above around a per-origin `keep`.
class GuardFilterPass : public Pass {
public:
  void run(GuardSet &S, const PassContext &Ctx) override;
  bool isFilter() const override { return true; }
  /// torch's filter applied to one GuardFilterEntry.
  virtual bool keep(const GuardOrigin &O) const = 0;

protected:
  /// How origins the IR does not record (HASATTR, DUPLICATE_INPUT) fare.
  enum class Unrecorded {
    Keep,        ///< the filter may keep them: keep (stricter than torch)
    Drop,        ///< the filter rejects them whatever their fields
    DropGlobals, ///< rejected exactly when their source is global
  };
  virtual Unrecorded unrecorded() const = 0;
};

/// `not entry.orig_guard.source.is_unspecialized_builtin_nn_module()`
class SkipInbuiltNNModulesPass : public GuardFilterPass {
public:
  static constexpr llvm::StringLiteral Name =
      "skip_guard_on_inbuilt_nn_modules_unsafe";
  llvm::StringRef name() const override { return Name; }
  bool keep(const GuardOrigin &O) const override {
    return !O.UnspecializedBuiltinNNModule;
  }
  Unrecorded unrecorded() const override { return Unrecorded::Keep; }
};

/// `not entry.orig_guard.source.is_unspecialized_nn_module()`
class SkipAllNNModulesPass : public GuardFilterPass {
public:
  static constexpr llvm::StringLiteral Name =
      "skip_guard_on_all_nn_modules_unsafe";
  llvm::StringRef name() const override { return Name; }
  bool keep(const GuardOrigin &O) const override {
    return !O.UnspecializedNNModule;
  }
  Unrecorded unrecorded() const override { return Unrecorded::Keep; }
};

/// TENSOR_MATCH entries, of a Parameter only with keep-parameters.
class KeepTensorGuardsPass : public GuardFilterPass {
public:
  static constexpr llvm::StringLiteral Name = "keep_tensor_guards_unsafe";
  explicit KeepTensorGuardsPass(const PassParams &P)
      : KeepParameters(P.count("keep-parameters") &&
                       P.at("keep-parameters")) {}
  explicit KeepTensorGuardsPass(bool KeepParameters = false)
      : KeepParameters(KeepParameters) {}
  llvm::StringRef name() const override { return Name; }
  void printPipeline(llvm::raw_ostream &OS) const override {
    OS << Name << (KeepParameters ? "<keep-parameters>" : "");
  }
  bool keep(const GuardOrigin &O) const override {
    // `isinstance(entry.value, torch.nn.Parameter)`: a MISSING value is not.
    return O.GuardType == "TENSOR_MATCH" &&
           (KeepParameters || !O.ValueIsParameter);
  }
  Unrecorded unrecorded() const override { return Unrecorded::Drop; }

private:
  bool KeepParameters;
};

/// GLOBAL_STATE, SHAPE_ENV, and TENSOR_MATCH entries that are not global.
class KeepPortableGuardsPass : public GuardFilterPass {
public:
  static constexpr llvm::StringLiteral Name = "keep_portable_guards_unsafe";
  llvm::StringRef name() const override { return Name; }
  bool keep(const GuardOrigin &O) const override {
    return O.GuardType == "GLOBAL_STATE" || O.GuardType == "SHAPE_ENV" ||
           (O.GuardType == "TENSOR_MATCH" && !O.IsGlobal);
  }
  Unrecorded unrecorded() const override { return Unrecorded::Drop; }
};

/// `not entry.is_global`
class SkipGlobalsPass : public GuardFilterPass {
public:
  static constexpr llvm::StringLiteral Name = "skip_guard_on_globals_unsafe";
  llvm::StringRef name() const override { return Name; }
  bool keep(const GuardOrigin &O) const override { return !O.IsGlobal; }
  Unrecorded unrecorded() const override { return Unrecorded::DropGlobals; }
};

/// Nothing.
class SkipAllGuardsPass : public GuardFilterPass {
public:
  static constexpr llvm::StringLiteral Name = "skip_all_guards_unsafe";
  llvm::StringRef name() const override { return Name; }
  bool keep(const GuardOrigin &) const override { return false; }
  Unrecorded unrecorded() const override { return Unrecorded::Drop; }
};

} // namespace guardjit

#endif // GUARDJIT_TRANSFORMS_GUARDFILTERS_H
