//===- Order.cpp - Cost-model guard ordering ------------------------------===//
//
// The model (estimates, not measurements of any one machine): a guard costs
// its own check plus the reads of its value's chain, the chain shared by the
// guards on that value; a guard fails with a fixed likelihood per kind, high
// for what changes between calls in practice (tensor shapes and dtypes of
// inputs, lengths, versions of mutated dicts), low for identities of
// modules and functions and for global state. For a conjunction, running
// guards by increasing cost / likelihood minimizes the expected cost of a
// failing check (the classic ordering of independent tests), and changes
// nothing for a passing one. The per-kind numbers (cost, fail likelihood,
// read cost, may run Python) are columns of Accessors.def / Guards.def.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Transforms/Order.h"

#include "guardjit/IR/KindFacts.h"

#include <algorithm>
#include <numeric>

using namespace guardjit;

void OrderPass::run(GuardSet &S, const PassContext &) {
  const std::vector<Value> &Vs = S.values();
  std::vector<Guard> &Gs = S.guards();
  // Per value: the cost of its whole chain and whether it may run Python.
  std::vector<double> ChainCost(Vs.size(), 0);
  std::vector<bool> ChainRunsPython(Vs.size(), false);
  for (ValueId I = 1; I < Vs.size(); ++I) {
    const Value &V = Vs[I];
    ChainCost[I] = ChainCost[V.Parent] + readCost(V.Kind);
    ChainRunsPython[I] = ChainRunsPython[V.Parent] || mayRunPython(V.Kind);
  }
  std::vector<unsigned> GuardsOn(Vs.size(), 0);
  for (const Guard &G : Gs)
    for (ValueId Op : G.Operands)
      ++GuardsOn[Op];

  enum Class { Pure, Python, Epilogue };
  std::vector<Class> Cls(Gs.size());
  std::vector<double> Score(Gs.size(), 0);
  for (size_t I = 0; I < Gs.size(); ++I) {
    const Guard &G = Gs[I];
    bool RunsPython = mayRunPython(G.Kind);
    double Cost = checkCost(G.Kind, G.Operands.size());
    for (ValueId Op : G.Operands) {
      RunsPython |= ChainRunsPython[Op];
      Cost += ChainCost[Op] / GuardsOn[Op];
    }
    Cls[I] = isEpilogueCall(G.Kind) ? Epilogue
             : RunsPython             ? Python
                                      : Pure;
    Score[I] = Cost / failLikelihood(G.Kind);
  }
  std::vector<size_t> Perm(Gs.size());
  std::iota(Perm.begin(), Perm.end(), 0);
  // Stable: Python-running guards (equal keys) keep their relative order, and
  // so do pure guards of equal score.
  std::stable_sort(Perm.begin(), Perm.end(), [&](size_t A, size_t B) {
    if (Cls[A] != Cls[B])
      return Cls[A] < Cls[B];
    return Cls[A] == Pure && Score[A] < Score[B];
  });
  std::vector<Guard> Out;
  Out.reserve(Gs.size());
  for (size_t I : Perm)
    Out.push_back(std::move(Gs[I]));
  Gs = std::move(Out);
}
