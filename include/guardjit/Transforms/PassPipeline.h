//===- PassPipeline.h - Parse and run -passes= pipelines --------*- C++ -*-===//
//
// The textual pipeline is a comma-separated list of Passes.def names, each
// optionally with boolean options in LLVM's syntax:
//
//   cse,dedup,keep_tensor_guards_unsafe<keep-parameters>
//
// A multi-set pass takes one parameter value instead (`diffset<minimal>`).
// A GJ_PIPELINE name (e.g. `default`) expands in place. Filters (the
// `_unsafe` passes) must come before any structural pass: torch filters the
// guards of the unoptimized tree, and a structural pass may merge or fold
// guards of different torch origins, after which a filter would no longer
// see torch's guards. A pipeline with a multi-set pass runs over the units of
// one code object (runUnits): the single-set passes before and after it run
// over each unit in turn.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TRANSFORMS_PASSPIPELINE_H
#define GUARDJIT_TRANSFORMS_PASSPIPELINE_H

#include "guardjit/Transforms/Pass.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace guardjit {

/// An error in a pipeline string, at byte `Column` (0-based) of it.
class PipelineError : public llvm::ErrorInfo<PipelineError> {
public:
  static char ID;
  PipelineError(size_t Column, std::string Message)
      : Column(Column), Message(std::move(Message)) {}
  size_t column() const { return Column; }
  const std::string &text() const { return Message; }
  void log(llvm::raw_ostream &OS) const override;
  std::error_code convertToErrorCode() const override;

private:
  size_t Column;
  std::string Message;
};

/// What one pass did to one set. Counts are "in minus out", so a pass that
/// adds guards would show negative numbers (none does).
struct PassRunStats {
  std::string Pass;
  /// Guards removed, indexed by GuardKind.
  std::vector<int64_t> GuardsRemoved;
  /// Values (accessor reads) removed.
  int64_t ValuesRemoved = 0;
  /// Wall time of run(), microseconds (of a multi-set pass: over all units).
  double Micros = 0;
  /// What a multi-set pass reports for this unit (empty for single-set
  /// passes).
  PassCounters Counters;
};

/// Hooks around each pass (the tool's --print-after-all and --time-passes).
struct PipelineInstrumentation {
  /// Called after each pass with the set it transformed.
  std::function<void(llvm::StringRef Pass, const GuardSet &)> AfterPass;
  /// Run the verifier after every pass (an invalid result is a bug in the
  /// pass, reported as an error naming it).
  bool VerifyEach = true;
};

class PassPipeline {
public:
  /// Parses `Text`; errors are PipelineErrors with the column at fault. An
  /// empty text is an empty pipeline.
  static llvm::Expected<PassPipeline> parse(llvm::StringRef Text);

  /// Runs every pass over `S` in order; appends one entry per pass to
  /// `Stats` if given. Fails when VerifyEach finds invalid IR, and when the
  /// pipeline has a multi-set pass (it needs every unit: runUnits).
  llvm::Error run(GuardSet &S, const PassContext &Ctx,
                  std::vector<PassRunStats> *Stats = nullptr,
                  const PipelineInstrumentation &Instr = {}) const;

  /// Runs every pass over the units of one code object, in cache order
  /// (front first; std::nullopt = opaque, skipped by single-set passes and
  /// kept opaque). `Stats`, if given, is resized to one list per unit, each
  /// with one entry per pass that ran over the unit. Fails only when
  /// VerifyEach finds invalid IR.
  llvm::Error runUnits(std::vector<std::optional<GuardSet>> &Units,
                       const PassContext &Ctx,
                       std::vector<std::vector<PassRunStats>> *Stats = nullptr,
                       const PipelineInstrumentation &Instr = {}) const;

  /// Whether some pass needs every unit of a code object.
  bool hasMultiSetPass() const;
  /// The name of the first multi-set pass ("" if none).
  std::string firstMultiSetPass() const;

  /// The canonical text (named pipelines expanded), accepted by parse().
  std::string str() const;
  bool empty() const { return Passes.empty(); }
  size_t size() const { return Passes.size(); }

  PassPipeline() = default;
  PassPipeline(PassPipeline &&) = default;
  PassPipeline &operator=(PassPipeline &&) = default;

private:
  /// One pass: exactly one of the two is set.
  struct Stage {
    std::unique_ptr<Pass> Single;
    std::unique_ptr<MultiSetPass> Multi;
  };
  std::vector<Stage> Passes;
};

/// Writes every pass and named pipeline with its description, one a line.
void printPassNames(llvm::raw_ostream &OS);

/// One entry of Passes.def, as --print-passes lists it.
struct RegisteredPass {
  enum class Kind { Pass, PassWithParams, MultiSetPass, Pipeline };
  Kind EntryKind;
  std::string Name;
  std::string Params;      ///< ';'- or '|'-separated; expansion of a pipeline
  std::string Description;
  /// A torch guard filter (name ends in `_unsafe`): drops guards by design.
  bool isTorchFilter() const;
};

/// Every pass, multi-set pass and named pipeline of Passes.def, in its order.
std::vector<RegisteredPass> registeredPasses();

} // namespace guardjit

#endif // GUARDJIT_TRANSFORMS_PASSPIPELINE_H
