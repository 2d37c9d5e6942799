//===- DiffSet.h - differentiating guard sets of one code object -*- C++ -*-===//
//
// `diffset<POLICY>`: for the compile units (cache entries) of one code object,
// in cache order (front first), computes per unit i a reduced set R_i ⊆ G_i
// that torch 2.13 can run as the unit's `diff_guard_root` under
// `torch.compiler.set_stance(skip_guard_eval_unsafe=True)`.
//
// Condition (docs/diffsets.md has the proofs): for every input x that passes
// some unit's full set G_j, R_i(x) <=> G_i(x) for every unit i. Then a lookup
// that runs the R_i in any order picks the unit a full-guard lookup picks in
// the same order, so torch's LRU move-to-front can reach no order in which
// one unit captures another's inputs. Since R_i ⊆ G_i, G_i => R_i; what
// remains is, for every pair (i, j != i): every x with G_j(x) and not G_i(x)
// fails R_i. Pair (i, j) is covered
//  (a) by contradiction: R_i holds a guard of G_i that no input passing G_j
//      passes (a provably unsatisfiable pair on the same value path), or
//  (b) by difference: R_i contains D_ij = G_i \ G_j (the checks of G_i with
//      no identical check in G_j); an empty D_ij needs nothing.
// An opaque unit j (nullptr: its guards are unknown) is covered only by (b)
// with D_ij = G_i. The smallest R_i is found exactly by branch and bound
// within a node budget, and greedily (within H(m) of the unshared set-cover
// optimum, docs/diffsets.md) otherwise; each unit's stats say which.
//
// "Checks" are the guards plus the reads of values that carry no guard and
// have no child (Dynamo's guard-less managers, e.g. hasattr: the read itself
// is a check). Values are identified across units by their accessor path from
// the root, guards by kind, operand paths and payload; objects by address
// when both are bound, else (parsed text) by (ObjectKind, repr): an
// assumption of the text form only.
//
// Assumptions shared with Dynamo: reading the same path twice in one lookup
// gives the same object, and checking a guard twice on it gives the same
// answer (GuardSet.h: order never changes the answer).
//
// Thread/GIL: ObjectFacts::FixedTypeOf is called for bound objects, so with
// live objects run() needs the GIL (as PassPipeline::run does).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TRANSFORMS_DIFFSET_H
#define GUARDJIT_TRANSFORMS_DIFFSET_H

#include "guardjit/Transforms/Pass.h"

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace guardjit {

/// What a reduced set promises beyond the routing condition.
enum class DiffSetPolicy : uint8_t {
  /// torch's seed (every guard on the value of a non-Parameter TENSOR_MATCH,
  /// and the SHAPE_ENV / epilogue guards, which torch's clone keeps) plus the
  /// fewest extra checks: an unwarmed input with a new tensor shape misses,
  /// raising the stance's error as in plain torch.
  TorchCompatible,
  /// The smallest correct set; unwarmed inputs are undefined (the stance's
  /// contract).
  Minimal,
  /// Minimal plus every TYPE_MATCH, NONE/TRUE/FALSE_MATCH, EQUALS_MATCH and,
  /// for each TENSOR_MATCH not kept, one with all sizes and strides dynamic
  /// (type, dispatch keys, dtype, device, requires_grad and rank): any such
  /// difference is a miss rather than a wrong graph.
  GuardedMinimal,
};

/// "torch-compatible", "minimal", "guarded-minimal".
std::string_view spelling(DiffSetPolicy P);
std::optional<DiffSetPolicy> parseDiffSetPolicy(std::string_view S);

/// What the pass did for one unit. Pair counts are over the other units j.
struct DiffSetUnitStats {
  size_t GuardsIn = 0;
  size_t GuardsOut = 0;
  /// Checks the policy kept before the search (torch-compatible's seed).
  size_t Seed = 0;
  /// Pairs covered by a kept guard that contradicts one of G_j.
  size_t ByContradiction = 0;
  /// Pairs covered by R_i ⊇ D_ij (including D_ij empty: G_j => G_i).
  size_t ByDifference = 0;
  /// Pairs with an opaque unit j (R_i = G_i).
  size_t ByOpaque = 0;
  /// Whether R_i is a smallest correct set over the seed (the search ended
  /// within the node budget); false: the greedy answer.
  bool Exact = true;
  /// Branch-and-bound nodes visited.
  size_t Nodes = 0;
};

/// One unit's answer: its reduced set (std::nullopt for an opaque unit) and
/// what it cost.
struct DiffSetUnit {
  std::optional<GuardSet> Set;
  DiffSetUnitStats Stats;
};

class DiffSetPass : public MultiSetPass {
public:
  static constexpr llvm::StringLiteral Name = "diffset";
  /// Branch-and-bound nodes per unit before the greedy answer is kept.
  static constexpr size_t DefaultNodeBudget = 100000;

  explicit DiffSetPass(DiffSetPolicy Policy = DiffSetPolicy::TorchCompatible,
                       size_t NodeBudget = DefaultNodeBudget)
      : Policy(Policy), NodeBudget(NodeBudget) {}
  /// From a -passes= parameter that PassPipeline checked against the
  /// policies ("" = torch-compatible).
  explicit DiffSetPass(llvm::StringRef Param);

  DiffSetPolicy policy() const { return Policy; }

  /// The reduced set of each unit of one code object. `Units` is in cache
  /// order (front first); nullptr is an opaque unit. Every set must verify.
  /// The result has one entry per unit, in the same order; the sets are new
  /// copies (same object addresses), inputs are not changed.
  std::vector<DiffSetUnit> run(const std::vector<const GuardSet *> &Units,
                               const PassContext &Ctx) const;

  llvm::StringRef name() const override { return Name; }
  void run(std::vector<std::optional<GuardSet>> &Units, const PassContext &Ctx,
           std::vector<PassCounters> *Counters) override;
  void printPipeline(llvm::raw_ostream &OS) const override;

private:
  DiffSetPolicy Policy;
  size_t NodeBudget;
};

} // namespace guardjit

#endif // GUARDJIT_TRANSFORMS_DIFFSET_H
