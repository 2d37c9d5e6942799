//===- Pass.cpp - Pass bindings -------------------------------------------===//
//
// run_pipeline (a -passes= pipeline over one set), registered_passes
// (Passes.def for Python) and diffsets (the multi-set pass).
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/ObjectFacts.h"
#include "guardjit/Transforms/DiffSet.h"
#include "guardjit/Transforms/PassPipeline.h"

#include "llvm/Support/Error.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;
using namespace guardjit;

namespace {

/// What live objects prove, for passes over `Sets` (nullptr entries are
/// opaque units and skipped): the recorder's objects are alive and the GIL is
/// held, so a pass may ask their fixed types. Parsed IR (some object with no
/// address) gets no facts: there is nothing live to ask.
ObjectFacts liveObjectFacts(const std::vector<const GuardSet *> &Sets) {
  for (const GuardSet *S : Sets)
    if (S)
      for (const ObjectEntry &E : S->objects())
        if (!E.Address)
          return ObjectFacts();
  ObjectFacts F;
  F.FixedTypeOf = fixedTypeOf;
  F.None = noneAddress();
  F.True = trueAddress();
  F.False = falseAddress();
  return F;
}

} // namespace

void guardjit::python::populatePass(py::module_ &M) {
  M.def(
      "run_pipeline",
      [](GuardSet &S, const std::string &Text) {
        llvm::Expected<PassPipeline> P = PassPipeline::parse(Text);
        if (!P)
          throw py::value_error("guardjit: bad pass pipeline '" + Text +
                                "': " + llvm::toString(P.takeError()));
        // The recorder's objects are alive: the passes may use what they
        // prove (fold-implied). The GIL is held: the facts read types.
        PassContext Ctx;
        Ctx.Facts = liveObjectFacts({&S});
        size_t GuardsIn = S.guards().size(), ValuesIn = S.values().size();
        std::vector<PassRunStats> Runs;
        if (llvm::Error E = P->run(S, Ctx, &Runs))
          throw std::runtime_error("guardjit: " +
                                   llvm::toString(std::move(E)));
        py::list Passes;
        for (const PassRunStats &R : Runs) {
          py::dict Removed;
          for (size_t K = 0; K < R.GuardsRemoved.size(); ++K)
            if (R.GuardsRemoved[K]) {
              py::str Name(std::string(torchName(static_cast<GuardKind>(K))));
              Removed[Name] = py::cast<size_t>(Removed.attr("get")(Name, 0)) +
                              R.GuardsRemoved[K];
            }
          py::dict D;
          D["name"] = R.Pass;
          D["guards_removed"] = Removed;
          D["values_removed"] = R.ValuesRemoved;
          D["us"] = R.Micros;
          Passes.append(D);
        }
        py::dict Out;
        Out["pipeline"] = P->str();
        Out["guards_in"] = GuardsIn;
        Out["guards_out"] = S.guards().size();
        Out["values_in"] = ValuesIn;
        Out["values_out"] = S.values().size();
        Out["passes"] = Passes;
        return Out;
      },
      py::arg("guard_set"), py::arg("pipeline") = "default",
      "Runs a -passes= pipeline (e.g. 'default', "
      "'skip_guard_on_all_nn_modules_unsafe,default') over the set in place, "
      "before it is bound. Call with the recorder's objects alive (GIL held). "
      "Returns {'pipeline', 'guards_in', 'guards_out', 'values_in', "
      "'values_out', 'passes': [{'name', 'guards_removed': {TORCH_KIND: n}, "
      "'values_removed', 'us'}]}. A bad pipeline raises ValueError with the "
      "column at fault.");

  M.def(
      "registered_passes",
      [] {
        py::list Out;
        for (const RegisteredPass &P : registeredPasses()) {
          static const char *const Kinds[] = {"pass", "pass_with_params",
                                              "multiset_pass", "pipeline"};
          py::dict D;
          D["name"] = P.Name;
          D["kind"] = Kinds[static_cast<int>(P.EntryKind)];
          D["params"] = P.Params;
          D["description"] = P.Description;
          D["torch_filter"] = P.isTorchFilter();
          Out.append(D);
        }
        return Out;
      },
      "Every entry of Passes.def in its order, as guard-ir-opt "
      "--print-passes lists them: [{'name', 'kind' ('pass', "
      "'pass_with_params', 'multiset_pass', 'pipeline'), 'params' (a "
      "pipeline's expansion), 'description', 'torch_filter' (one of torch's "
      "guard_filter_fn filters, named as in torch.compiler)}].");

  M.def(
      "diffsets",
      [](const std::vector<std::shared_ptr<GuardSet>> &Sets,
         const std::string &Policy) {
        std::optional<DiffSetPolicy> P = parseDiffSetPolicy(Policy);
        if (!P)
          throw py::value_error("guardjit: unknown diffset policy '" + Policy +
                                "' (expected: torch-compatible, minimal, "
                                "guarded-minimal)");
        std::vector<const GuardSet *> Units;
        for (const std::shared_ptr<GuardSet> &S : Sets)
          Units.push_back(S.get());
        PassContext Ctx;
        Ctx.Facts = liveObjectFacts(Units);
        std::vector<DiffSetUnit> Result = DiffSetPass(*P).run(Units, Ctx);
        py::list OutSets, OutUnits;
        for (DiffSetUnit &U : Result) {
          if (U.Set)
            OutSets.append(std::make_shared<GuardSet>(std::move(*U.Set)));
          else
            OutSets.append(py::none());
          const DiffSetUnitStats &St = U.Stats;
          py::dict D;
          D["guards_in"] = St.GuardsIn;
          D["guards_out"] = St.GuardsOut;
          D["seed"] = St.Seed;
          D["by_contradiction"] = St.ByContradiction;
          D["by_difference"] = St.ByDifference;
          D["by_opaque"] = St.ByOpaque;
          D["exact"] = St.Exact;
          OutUnits.append(D);
        }
        py::dict Out;
        Out["sets"] = OutSets;
        Out["units"] = OutUnits;
        return Out;
      },
      py::arg("sets"), py::arg("policy") = "torch-compatible",
      "Differentiating sets of the compile units of one code object "
      "(docs/diffsets.md). `sets` is in cache order (front first); None is a "
      "unit whose guards guardjit does not know (then every other unit keeps "
      "all of its guards). Returns {'sets': [GuardSet | None, ...] (new "
      "reduced copies, same order, same object addresses; None stays None), "
      "'units': [{'guards_in', 'guards_out', 'seed', 'by_contradiction', "
      "'by_difference', 'by_opaque', 'exact'}, ...]}: per unit, the pairs "
      "(i, j) covered by a contradicting guard, by keeping G_i \\ G_j, or by "
      "an opaque j, and whether the set is a smallest one. The inputs are not "
      "changed. Call with the recorder's objects alive and the GIL held. An "
      "unknown policy raises ValueError.");
}
