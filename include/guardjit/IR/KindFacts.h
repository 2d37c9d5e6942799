//===- KindFacts.h - What each accessor and guard kind is -------*- C++ -*-===//
//
// The accessor and guard kinds, and what each kind *is*: one constexpr
// predicate per column of include/guardjit/IR/Accessors.def and Guards.def
// (the headers of those files explain each column). Passes, the binder and
// the runtime ask these predicates instead of switching on kinds, so adding a
// kind means its .def line, its interpreter semantics and its lowering.
//
// Each .def is expanded once into a table indexed by the kind; the
// predicates read the table.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_IR_KINDFACTS_H
#define GUARDJIT_IR_KINDFACTS_H

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace guardjit {

#define GJ_ACCESSOR(Enum, Spelling, TorchName, ...) Enum,
enum class AccessorKind : uint8_t {
#include "guardjit/IR/Accessors.def"
};

#define GJ_GUARD(Enum, Spelling, TorchName, ...) Enum,
enum class GuardKind : uint8_t {
#include "guardjit/IR/Guards.def"
};

/// What an object table entry is, for printing and for ownership.
enum class ObjectKind : uint8_t {
  Type,     ///< a type object, compared by identity
  Object,   ///< any object compared by identity (ID_MATCH)
  Constant, ///< a value compared by ==, kept alive (EQUALS_MATCH)
  Callable, ///< a Python callable invoked by a lambda guard
  Dict,     ///< a dict read by an accessor (f_globals)
  Key,      ///< a dict key (str or other hashable), kept alive
  State,    ///< an opaque torch object (GlobalStateGuard, device)
};

//===----------------------------------------------------------------------===//
// Column vocabularies (one enum per column; Accessors.def / Guards.def say
// what each value means)
//===----------------------------------------------------------------------===//

enum class Reference : uint8_t { Borrowed, NewRef };
enum class PythonUse : uint8_t { NoPython, MayRunPython };
enum class ReadReuse : uint8_t { Unstable, Stable };
enum class IndexUse : uint8_t { NoIndex, AnyIndex, DimIndex, DictIndex };
enum class ReadFailure : uint8_t {
  MayFail,
  NeverFails,
  FailsUnlessParentIsType,
};
enum class ObjectUse : uint8_t { None, Optional, Required };
/// What a guard's `object` or a value's `key` must be: whether it is used,
/// and the ObjectKinds allowed (bit 1 << kind; 0 means any kind).
struct ObjectRule {
  ObjectUse U = ObjectUse::None;
  unsigned Kinds = 0;
};
enum class UserCallUse : uint8_t { NoUserCall, UserCall, EpilogueCall };
enum class ValuePin : uint8_t {
  NoPin,
  PinExactType,
  PinTensorType,
  PinIdentity,
  PinEqual,
  PinNone,
  PinTrue,
  PinFalse,
  PinNotNone,
};
enum class DiffKeepRule : uint8_t { DiffDrop, DiffKeep, DiffKeepWithoutSizes };
enum class DiffCompare : uint8_t {
  CompareFields,
  CompareInt,
  CompareMembership,
  CompareTensorSpec,
  CompareStateJson,
  CompareShapeExpr,
};
enum class ResidualUse : uint8_t {
  NotResidual,
  Residual,
  ResidualIfStrKey,
  ResidualIfScalarConstant,
  ResidualIfStrObject,
  ResidualIfNoFallback,
};
enum class TorchUse : uint8_t { NoTorch, NeedsTorch, TorchPayload };

namespace kindfacts {

/// A check's cost (Guards.def `Cost`): `Base`, times the operand count when
/// `PerOperand`.
struct CheckCost {
  double Base;
  bool PerOperand;
};
constexpr CheckCost costOf(double Base) { return {Base, false}; }
constexpr CheckCost costOf(CheckCost C) { return C; }
/// Guards.def's `Cost` column may be an expression in `Ops`; this stands for
/// the operand count so the column is stored as {Base, PerOperand}.
struct OperandCount {};
constexpr OperandCount Ops{};
constexpr CheckCost operator*(double Base, OperandCount) {
  return {Base, true};
}

/// Guards.def's `Arity` for "one or more".
constexpr int Many = -1;

/// The vocabulary of the `Object` / `Key` columns: ObjectKind bits.
constexpr unsigned bitOf(ObjectKind K) {
  return 1u << static_cast<unsigned>(K);
}
constexpr unsigned AnyObject = 0;
constexpr unsigned Type = bitOf(ObjectKind::Type);
constexpr unsigned Object = bitOf(ObjectKind::Object);
constexpr unsigned Constant = bitOf(ObjectKind::Constant);
constexpr unsigned Callable = bitOf(ObjectKind::Callable);
constexpr unsigned Dict = bitOf(ObjectKind::Dict);
constexpr unsigned Key = bitOf(ObjectKind::Key);
constexpr unsigned State = bitOf(ObjectKind::State);
constexpr ObjectRule Needs(unsigned Kinds) {
  return {ObjectUse::Required, Kinds};
}
constexpr ObjectRule MayHave(unsigned Kinds) {
  return {ObjectUse::Optional, Kinds};
}
constexpr ObjectRule NoObject{ObjectUse::None, 0};

struct AccessorFacts {
  Reference Ref;
  PythonUse Python;
  ReadReuse Reuse;
  ObjectRule Key;
  IndexUse Index;
  ReadFailure Failure;
  double ReadCost;
  ResidualUse Residual;
  TorchUse Torch;
};

struct GuardFacts {
  int Arity;
  ObjectRule Object;
  ObjectRule Aux;
  PythonUse Python;
  UserCallUse Call;
  CheckCost Cost;
  double FailRate;
  ValuePin Pin;
  unsigned DiffRank;
  DiffKeepRule Keep;
  DiffCompare Compare;
  ResidualUse Residual;
  TorchUse Torch;
};

inline constexpr AccessorFacts AccessorTable[] = {
#define GJ_ACCESSOR(Enum, Spelling, TorchName, Ref, Py, Reuse, KeyRule,       \
                    Index, Failure, ReadCost, Residual, Torch)                 \
  {Reference::Ref,                                                             \
   PythonUse::Py,                                                              \
   ReadReuse::Reuse,                                                           \
   KeyRule,                                                                    \
   IndexUse::Index,                                                            \
   ReadFailure::Failure,                                                       \
   double(ReadCost),                                                           \
   ResidualUse::Residual,                                                      \
   TorchUse::Torch},
#include "guardjit/IR/Accessors.def"
};

inline constexpr GuardFacts GuardTable[] = {
#define GJ_GUARD(Enum, Spelling, TorchName, Arity, ObjRule, AuxRule, Py, Call, \
                 Cost, FailRate, Pin, DiffRank, Keep, Compare, Residual,       \
                 Torch)                                                        \
  {Arity,                                                                      \
   ObjRule,                                                                    \
   AuxRule,                                                                    \
   PythonUse::Py,                                                              \
   UserCallUse::Call,                                                          \
   costOf(Cost),                                                               \
   FailRate,                                                                   \
   ValuePin::Pin,                                                              \
   DiffRank,                                                                   \
   DiffKeepRule::Keep,                                                         \
   DiffCompare::Compare,                                                       \
   ResidualUse::Residual,                                                      \
   TorchUse::Torch},
#include "guardjit/IR/Guards.def"
};

constexpr size_t NumAccessorKinds = std::size(AccessorTable);
constexpr size_t NumGuardKinds = std::size(GuardTable);

constexpr const AccessorFacts &of(AccessorKind K) {
  return AccessorTable[static_cast<size_t>(K)];
}
constexpr const GuardFacts &of(GuardKind K) {
  return GuardTable[static_cast<size_t>(K)];
}

} // namespace kindfacts

//===----------------------------------------------------------------------===//
// Accessor predicates (Accessors.def columns)
//===----------------------------------------------------------------------===//

/// Whether the runtime accessor for `K` returns a new reference that the
/// caller must release with gj_rt_decref once the value's guards have run.
constexpr bool accessorReturnsNewRef(AccessorKind K) {
  return kindfacts::of(K).Ref == Reference::NewRef;
}
/// Whether reading a value of kind `K` may run Python code.
constexpr bool mayRunPython(AccessorKind K) {
  return kindfacts::of(K).Python == PythonUse::MayRunPython;
}
/// Whether the read returns the same object each time on the same parent
/// within one call and runs no Python code (CSE shares such reads).
constexpr bool isStableRead(AccessorKind K) {
  return kindfacts::of(K).Reuse == ReadReuse::Stable;
}
/// Whether an accessor of kind `K` needs its `Key` object. contextvar_get
/// reads one only when present (get(d)'s default) and is not counted here.
constexpr bool accessorReadsKey(AccessorKind K) {
  return kindfacts::of(K).Key.U == ObjectUse::Required;
}
/// What the `key` of a value of kind `K` must be (the verifier's rule).
constexpr ObjectRule valueKeyRule(AccessorKind K) {
  return kindfacts::of(K).Key;
}
/// What the `index` of a value of kind `K` must be (the verifier's rule).
constexpr IndexUse valueIndexUse(AccessorKind K) {
  return kindfacts::of(K).Index;
}
/// When a read of kind `K` cannot fail once its parent was read.
constexpr ReadFailure readFailure(AccessorKind K) {
  return kindfacts::of(K).Failure;
}
/// Relative cost of the read, in units of one pointer compare.
constexpr double readCost(AccessorKind K) { return kindfacts::of(K).ReadCost; }
/// Whether a subtree-skip residual set may keep reads of kind `K`.
constexpr ResidualUse residualUse(AccessorKind K) {
  return kindfacts::of(K).Residual;
}
/// Whether binding a set that reads kind `K` needs the ATen-backed hooks.
constexpr bool needsTorchHooks(AccessorKind K) {
  return kindfacts::of(K).Torch != TorchUse::NoTorch;
}

//===----------------------------------------------------------------------===//
// Guard predicates (Guards.def columns)
//===----------------------------------------------------------------------===//

/// Operands a guard of kind `K` reads: 0 for root guards over ambient state
/// and epilogue lambdas (they receive the frame locals), 2 for
/// OBJECT_ALIASING, -1 for "one or more" (NO_TENSOR_ALIASING,
/// STORAGE_OVERLAPPING, SHAPE_ENV expressions), 1 otherwise. The one
/// definition the verifier, the binder and the lowering share.
constexpr int guardArity(GuardKind K) { return kindfacts::of(K).Arity; }
/// Whether a guard of kind `K` needs its `Object` table entry (checked when
/// verifying, binding and lowering).
constexpr bool guardReadsObject(GuardKind K) {
  return kindfacts::of(K).Object.U == ObjectUse::Required;
}
/// What the `object` of a guard of kind `K` must be (the verifier's rule).
constexpr ObjectRule guardObjectRule(GuardKind K) {
  return kindfacts::of(K).Object;
}
/// Whether a check of kind `K` may run Python code (a user __eq__, __len__,
/// __hash__, __getattr__, or a lambda).
constexpr bool mayRunPython(GuardKind K) {
  return kindfacts::of(K).Python == PythonUse::MayRunPython;
}
/// What the `aux` of a guard of kind `K` must be (the verifier's rule).
constexpr ObjectRule guardAuxRule(GuardKind K) { return kindfacts::of(K).Aux; }
/// Whether a check of kind `K` calls a user callable once per run (a
/// lambda guard): two such guards are never merged.
constexpr bool callsUserCode(GuardKind K) {
  return kindfacts::of(K).Call != UserCallUse::NoUserCall;
}
/// Whether a check of kind `K` is a user call that runs after every other
/// guard (an epilogue lambda).
constexpr bool isEpilogueCall(GuardKind K) {
  return kindfacts::of(K).Call == UserCallUse::EpilogueCall;
}
/// Relative cost of a check of kind `K` over `NumOperands` operands, in
/// units of one pointer compare.
constexpr double checkCost(GuardKind K, size_t NumOperands) {
  kindfacts::CheckCost C = kindfacts::of(K).Cost;
  return C.PerOperand ? C.Base * double(NumOperands) : C.Base;
}
/// Estimated likelihood that a check of kind `K` fails when the whole check
/// fails.
constexpr double failLikelihood(GuardKind K) {
  return kindfacts::of(K).FailRate;
}
/// What a value passing a guard of kind `K` is known to be.
constexpr ValuePin valuePin(GuardKind K) { return kindfacts::of(K).Pin; }
/// Differentiating-set tie-break rank: cheaper kinds first.
constexpr unsigned diffRank(GuardKind K) { return kindfacts::of(K).DiffRank; }
/// What the guarded-minimal differentiating set does with an unneeded guard.
constexpr DiffKeepRule diffKeep(GuardKind K) { return kindfacts::of(K).Keep; }
/// How the differentiating set compares two guards of kind `K`.
constexpr DiffCompare diffCompare(GuardKind K) {
  return kindfacts::of(K).Compare;
}
/// Whether a subtree-skip residual set may keep guards of kind `K`.
constexpr ResidualUse residualUse(GuardKind K) {
  return kindfacts::of(K).Residual;
}
/// Whether binding prepares a TorchHooks payload for guards of kind `K`.
constexpr bool hasTorchPayload(GuardKind K) {
  return kindfacts::of(K).Torch == TorchUse::TorchPayload;
}
/// Whether binding a set with a guard of kind `K` needs the ATen-backed
/// hooks.
constexpr bool needsTorchHooks(GuardKind K) {
  return kindfacts::of(K).Torch != TorchUse::NoTorch;
}

} // namespace guardjit

#endif // GUARDJIT_IR_KINDFACTS_H
