//===- Rewrite.cpp - Shared IR edits of the passes ------------------------===//
#include "Rewrite.h"

#include <cassert>
#include <cctype>
#include <string_view>

namespace guardjit {

void eraseGuards(GuardSet &S, const std::vector<bool> &Dead) {
  std::vector<Guard> &Gs = S.guards();
  size_t Out = 0;
  for (size_t I = 0; I < Gs.size(); ++I)
    if (!Dead[I]) {
      if (Out != I)
        Gs[Out] = std::move(Gs[I]);
      ++Out;
    }
  Gs.resize(Out);
}

void rewriteValues(GuardSet &S, const std::vector<ValueId> &Map,
                   const std::vector<bool> &Dead) {
  std::vector<Value> &Vs = S.values();
  assert(!Dead[GuardSet::root()] && "the root is never removed");
  std::vector<ValueId> NewId(Vs.size(), InvalidId);
  ValueId Next = 0;
  for (ValueId I = 0; I < Vs.size(); ++I)
    if (!Dead[I])
      NewId[I] = Next++;
  auto Final = [&](ValueId Id) {
    ValueId M = Map[Id];
    assert(!Dead[M] && "a use of a removed value remains");
    return NewId[M];
  };
  for (Guard &G : S.guards())
    for (ValueId &Op : G.Operands)
      Op = Final(Op);
  std::vector<Value> Out;
  Out.reserve(Next);
  for (ValueId I = 0; I < Vs.size(); ++I) {
    if (Dead[I])
      continue;
    Value V = std::move(Vs[I]);
    if (V.Parent != InvalidId)
      V.Parent = Final(V.Parent);
    Out.push_back(std::move(V));
  }
  Vs = std::move(Out);
}

ValueUses computeUses(const GuardSet &S) {
  ValueUses U;
  U.GuardUses.assign(S.values().size(), 0);
  U.Children.assign(S.values().size(), 0);
  for (const Guard &G : S.guards())
    for (ValueId Op : G.Operands)
      ++U.GuardUses[Op];
  for (const Value &V : S.values())
    if (V.Parent != InvalidId)
      ++U.Children[V.Parent];
  return U;
}

/// A Python str or int literal as repr() writes it: the text determines the
/// object's value (and so its hash and ==).
static bool isLiteralRepr(std::string_view R) {
  if (R.size() >= 2 && (R.front() == '\'' || R.front() == '"') &&
      R.back() == R.front())
    return true;
  size_t I = !R.empty() && R[0] == '-';
  if (I == R.size())
    return false;
  for (; I < R.size(); ++I)
    if (!std::isdigit(static_cast<unsigned char>(R[I])))
      return false;
  return true;
}

bool sameObject(const GuardSet &S, ObjectId A, ObjectId B) {
  if (A == B)
    return true;
  if (A == InvalidId || B == InvalidId)
    return false;
  const ObjectEntry &EA = S.object(A), &EB = S.object(B);
  if (EA.Address || EB.Address)
    return EA.Address == EB.Address;
  return EA.Kind == EB.Kind && EA.Repr == EB.Repr && isLiteralRepr(EA.Repr);
}

} // namespace guardjit
