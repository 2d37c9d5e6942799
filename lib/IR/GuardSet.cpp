//===- GuardSet.cpp - Guard IR for one compile unit -----------------------===//
#include "guardjit/IR/GuardSet.h"

#include <cassert>
#include <utility>

namespace guardjit {

std::string_view spelling(AccessorKind K) {
  switch (K) {
#define GJ_ACCESSOR(Enum, Spelling, TorchName, ...)                            \
  case AccessorKind::Enum:                                                     \
    return Spelling;
#include "guardjit/IR/Accessors.def"
  }
  return "<invalid-accessor>";
}

std::string_view spelling(GuardKind K) {
  switch (K) {
#define GJ_GUARD(Enum, Spelling, TorchName, ...)                               \
  case GuardKind::Enum:                                                        \
    return Spelling;
#include "guardjit/IR/Guards.def"
  }
  return "<invalid-guard>";
}

std::string_view torchName(GuardKind K) {
  switch (K) {
#define GJ_GUARD(Enum, Spelling, TorchName, ...)                               \
  case GuardKind::Enum:                                                        \
    return TorchName;
#include "guardjit/IR/Guards.def"
  }
  return "<invalid-guard>";
}

std::optional<AccessorKind> parseAccessorKind(std::string_view S) {
#define GJ_ACCESSOR(Enum, Spelling, TorchName, ...)                            \
  if (S == Spelling)                                                           \
    return AccessorKind::Enum;
#include "guardjit/IR/Accessors.def"
  return std::nullopt;
}

std::optional<GuardKind> parseGuardKind(std::string_view S) {
#define GJ_GUARD(Enum, Spelling, TorchName, ...)                               \
  if (S == Spelling)                                                           \
    return GuardKind::Enum;
#include "guardjit/IR/Guards.def"
  return std::nullopt;
}

// ObjectKind has no .def file: it is printer vocabulary, not a torch concept.
static constexpr std::pair<ObjectKind, std::string_view> ObjectKindNames[] = {
    {ObjectKind::Type, "type"},         {ObjectKind::Object, "object"},
    {ObjectKind::Constant, "constant"}, {ObjectKind::Callable, "callable"},
    {ObjectKind::Dict, "dict"},         {ObjectKind::Key, "key"},
    {ObjectKind::State, "state"},
};

std::string_view spelling(ObjectKind K) {
  for (const auto &[Kind, Name] : ObjectKindNames)
    if (Kind == K)
      return Name;
  return "<invalid-object-kind>";
}

std::optional<ObjectKind> parseObjectKind(std::string_view S) {
  for (const auto &[Kind, Name] : ObjectKindNames)
    if (Name == S)
      return Kind;
  return std::nullopt;
}

GuardSet::GuardSet(std::string Name) : Name(std::move(Name)) {
  Value Root;
  Root.Kind = AccessorKind::Root;
  Root.Source = "L";
  Values.push_back(std::move(Root));
}

ObjectId GuardSet::addObject(ObjectEntry E) {
  Objects.push_back(std::move(E));
  return static_cast<ObjectId>(Objects.size() - 1);
}

ValueId GuardSet::addValue(Value V) {
  assert(V.Kind != AccessorKind::Root && "the root value exists already");
  assert(V.Parent < Values.size() && "parent must precede its children");
  Values.push_back(std::move(V));
  return static_cast<ValueId>(Values.size() - 1);
}

static bool sameAccess(const GuardSet &S, const Value &A, const Value &B) {
  if (A.Kind != B.Kind || A.Parent != B.Parent || A.Name != B.Name ||
      A.Index != B.Index)
    return false;
  if (A.Key == B.Key)
    return true;
  if (A.Key == InvalidId || B.Key == InvalidId)
    return false;
  // Keys are distinct table entries for the same bound object.
  const ObjectEntry &KA = S.object(A.Key), &KB = S.object(B.Key);
  return KA.Address != 0 && KA.Address == KB.Address;
}

ValueId GuardSet::getOrAddValue(Value V) {
  for (ValueId I = 1; I < Values.size(); ++I)
    if (sameAccess(*this, Values[I], V))
      return I;
  return addValue(std::move(V));
}

uint32_t GuardSet::addTensorSpec(TensorSpec S) {
  TensorSpecs.push_back(std::move(S));
  return static_cast<uint32_t>(TensorSpecs.size() - 1);
}

uint32_t GuardSet::addOrigin(GuardOrigin O) {
  Origins.push_back(std::move(O));
  return static_cast<uint32_t>(Origins.size() - 1);
}

void GuardSet::addGuard(Guard G) {
#ifndef NDEBUG
  for (ValueId Op : G.Operands)
    assert(Op < Values.size() && "guard operand must be a defined value");
#endif
  Guards.push_back(std::move(G));
}

std::vector<size_t> GuardSet::countByKind() const {
  size_t NumKinds = 0;
#define GJ_GUARD(Enum, Spelling, TorchName, ...) ++NumKinds;
#include "guardjit/IR/Guards.def"
  std::vector<size_t> Counts(NumKinds, 0);
  for (const Guard &G : Guards)
    ++Counts[static_cast<size_t>(G.Kind)];
  return Counts;
}

} // namespace guardjit
