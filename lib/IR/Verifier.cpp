//===- Verifier.cpp - Structural checks of Guard IR -----------------------===//
//
// The rules mirror what BoundGuardSet::bind checks against live objects and
// what the interpreter and the lowering read, so that IR the verifier accepts
// can only fail to bind for reasons of the objects themselves.
//
//===----------------------------------------------------------------------===//
#include "guardjit/IR/Verifier.h"

#include "guardjit/IR/Parser.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/SourceMgr.h"

using namespace guardjit;
using llvm::Twine;

namespace {

using Diag = VerifierDiagnostic;

/// A set of ObjectKinds; 0 means "any kind".
using KindMask = unsigned;
constexpr KindMask bit(ObjectKind K) { return 1u << static_cast<unsigned>(K); }
constexpr KindMask AnyKind = 0;

/// Whether an object is used (KindFacts.h ObjectRule, a Guards.def /
/// Accessors.def column).
using Use = ObjectUse;

enum class Arity { Zero, One, Two, AtLeastOne };

Arity arity(GuardKind K) {
  switch (guardArity(K)) {
  case 0:
    return Arity::Zero;
  case 1:
    return Arity::One;
  case 2:
    return Arity::Two;
  default:
    return Arity::AtLeastOne;
  }
}

/// "a type object" / "a key or constant object".
std::string describeKinds(KindMask M) {
  std::string Out;
  for (unsigned I = 0; I < 32; ++I) {
    if (!(M & (1u << I)))
      continue;
    if (!Out.empty())
      Out += " or ";
    Out += spelling(static_cast<ObjectKind>(I));
  }
  std::string_view First = Out;
  bool Vowel = !First.empty() && std::string_view("aeiou").find(First[0]) !=
                                     std::string_view::npos;
  return (Vowel ? "an " : "a ") + Out + " object";
}

std::string article(ObjectKind K) {
  std::string S(spelling(K));
  bool Vowel = std::string_view("aeiou").find(S[0]) != std::string_view::npos;
  return (Vowel ? "an " : "a ") + S;
}

class Checker {
public:
  Checker(const GuardSet &S, llvm::function_ref<void(const Diag &)> Report)
      : S(S), Report(Report) {}

  bool run() {
    checkRoot();
    for (uint32_t I = 0; I < S.tensorSpecs().size(); ++I)
      checkTensorSpec(I);
    for (ValueId I = 1; I < S.values().size(); ++I)
      checkValue(I);
    for (uint32_t I = 0; I < S.guards().size(); ++I)
      checkGuard(I);
    return Ok;
  }

private:
  void report(Diag::EntityKind E, uint32_t Index, Diag::FieldKind F,
              const Twine &Msg, uint32_t OperandIndex = 0) {
    Ok = false;
    Report({E, Index, F, OperandIndex, Msg.str()});
  }

  /// Checks an object reference against `Rule`; `What` names the owner
  /// ("type_match", "pytype") and `Attr` the attribute ("object", "key").
  void checkObject(Diag::EntityKind E, uint32_t Index, Diag::FieldKind F,
                   ObjectId Id, ObjectRule Rule, std::string_view What,
                   std::string_view Attr) {
    if (Id == InvalidId) {
      if (Rule.U == Use::Required)
        report(E, Index, Diag::Whole,
               Twine(What) + " needs " + Attr + "=#N");
      return;
    }
    if (Rule.U == Use::None) {
      report(E, Index, F, Twine(What) + " takes no " + Attr);
      return;
    }
    if (Id >= S.objects().size()) {
      report(E, Index, F, "use of undefined object #" + Twine(Id));
      return;
    }
    ObjectKind K = S.object(Id).Kind;
    if (Rule.Kinds != AnyKind && !(Rule.Kinds & bit(K)))
      report(E, Index, F,
             Twine(What) + " needs " + describeKinds(Rule.Kinds) + ", #" +
                 Twine(Id) + " is " + article(K));
  }

  void checkRoot() {
    const auto &Values = S.values();
    if (Values.empty()) {
      report(Diag::Set, 0, Diag::Whole, "a guard set needs the root value %0");
      return;
    }
    if (Values[0].Kind != AccessorKind::Root)
      report(Diag::Value, 0, Diag::Whole, "%0 must be the root value");
    else if (Values[0].Parent != InvalidId)
      report(Diag::Value, 0, Diag::Operand, "the root value has no parent");
  }

  void checkTensorSpec(uint32_t I) {
    const TensorSpec &T = S.tensorSpec(I);
    checkObject(Diag::TensorSpec, I, Diag::ObjectRef, T.PyType,
                {Use::Required, bit(ObjectKind::Type)}, "tensor spec",
                "pytype");
    if (T.Sizes.size() != T.Strides.size())
      report(Diag::TensorSpec, I, Diag::Whole,
             "sizes and strides have different ranks (" +
                 Twine(T.Sizes.size()) + " and " + Twine(T.Strides.size()) +
                 ")");
  }

  void checkValue(ValueId I) {
    const guardjit::Value &V = S.value(I);
    std::string_view Kind = spelling(V.Kind);
    if (V.Kind == AccessorKind::Root) {
      report(Diag::Value, I, Diag::Whole, "only %0 may be a root value");
      return;
    }
    if (V.Parent == InvalidId)
      report(Diag::Value, I, Diag::Whole,
             Twine(Kind) + " needs a parent value");
    else if (V.Parent >= S.values().size())
      report(Diag::Value, I, Diag::Operand,
             "use of undefined value %" + Twine(V.Parent));
    else if (V.Parent >= I)
      report(Diag::Value, I, Diag::Operand,
             "parent %" + Twine(V.Parent) + " must be defined before %" +
                 Twine(I));
    checkObject(Diag::Value, I, Diag::ObjectRef, V.Key, valueKeyRule(V.Kind),
                Kind, "key");
    // GlobalWeakRefGuardAccessor is always a child of GlobalsGuardAccessor.
    if (V.Kind == AccessorKind::GlobalWeakRef && V.Parent < I &&
        S.value(V.Parent).Kind != AccessorKind::Globals)
      report(Diag::Value, I, Diag::Operand,
             "global_weakref needs a globals parent, %" + Twine(V.Parent) +
                 " is " + spelling(S.value(V.Parent).Kind));
    if (valueIndexUse(V.Kind) == IndexUse::AnyIndex && V.Index == -1)
      report(Diag::Value, I, Diag::Whole, Twine(Kind) + " needs index=N");
    if (valueIndexUse(V.Kind) == IndexUse::DimIndex && V.Index < 0)
      report(Diag::Value, I, Diag::Whole,
             Twine(Kind) + " needs index=N (a dimension) with N >= 0");
    if (V.Kind == AccessorKind::TensorStorageOffset && V.Index != -1)
      report(Diag::Value, I, Diag::Whole, Twine(Kind) + " takes no index");
    if (V.Kind == AccessorKind::Recorded &&
        (V.Index < 0 || V.Parent != GuardSet::root()))
      report(Diag::Value, I, Diag::Whole,
             "recorded needs the root as parent and index=N with N >= 0");
    if (valueIndexUse(V.Kind) == IndexUse::DictIndex && V.Index < 0)
      report(Diag::Value, I, Diag::Whole,
             Twine(Kind) + " needs index=N with N >= 0");
    if (V.Origin != InvalidId && V.Origin >= S.origins().size())
      report(Diag::Value, I, Diag::OriginRef,
             "use of undefined origin " + Twine(V.Origin));
  }

  void checkGuard(uint32_t I) {
    const guardjit::Guard &G = S.guards()[I];
    std::string_view Kind = spelling(G.Kind);
    size_t N = G.Operands.size();
    switch (arity(G.Kind)) {
    case Arity::Zero:
      if (N != 0)
        report(Diag::Guard, I, Diag::Operand,
               Twine(Kind) + " takes no operands, got " + Twine(N));
      break;
    case Arity::One:
      if (N != 1)
        report(Diag::Guard, I, N > 1 ? Diag::Operand : Diag::Whole,
               Twine(Kind) + " takes 1 operand, got " + Twine(N), 1);
      break;
    case Arity::Two:
      if (N != 2)
        report(Diag::Guard, I, N > 2 ? Diag::Operand : Diag::Whole,
               Twine(Kind) + " takes 2 operands, got " + Twine(N), 2);
      break;
    case Arity::AtLeastOne:
      if (N == 0)
        report(Diag::Guard, I, Diag::Whole,
               Twine(Kind) + " takes at least 1 operand");
      break;
    }
    for (uint32_t Op = 0; Op < N; ++Op)
      if (G.Operands[Op] >= S.values().size())
        report(Diag::Guard, I, Diag::Operand,
               "use of undefined value %" + Twine(G.Operands[Op]), Op);
    checkObject(Diag::Guard, I, Diag::ObjectRef, G.Object,
                guardObjectRule(G.Kind), Kind, "object");
    checkObject(Diag::Guard, I, Diag::AuxRef, G.Aux, guardAuxRule(G.Kind),
                Kind, "aux");
    if (G.Kind == GuardKind::TensorMatch) {
      if (G.Tensor == InvalidId)
        report(Diag::Guard, I, Diag::Whole, "tensor_match needs tensor=N");
      else if (G.Tensor >= S.tensorSpecs().size())
        report(Diag::Guard, I, Diag::TensorRef,
               "use of undefined tensor spec " + Twine(G.Tensor));
    } else if (G.Tensor != InvalidId) {
      report(Diag::Guard, I, Diag::TensorRef,
             Twine(Kind) + " takes no tensor spec");
    }
    if (G.Origin != InvalidId && G.Origin >= S.origins().size())
      report(Diag::Guard, I, Diag::OriginRef,
             "use of undefined origin " + Twine(G.Origin));
    if (G.Kind == GuardKind::RangeIteratorMatch && G.Ints.size() != 3)
      report(Diag::Guard, I, Diag::Whole,
             "range_iterator_match needs ints=[start, stop, step], got " +
                 Twine(G.Ints.size()) + " integer(s)");
    else if (G.Kind == GuardKind::SavedTensorsHooks) {
      if (G.Int != 0 && G.Int != 1)
        report(Diag::Guard, I, Diag::Whole,
               "saved_tensors_hooks needs int=0 (no inlineable hooks) or "
               "int=1 (hooks with ids), got " +
                   Twine(G.Int));
      else if (G.Ints.size() != (G.Int ? 2u : 0u))
        report(Diag::Guard, I, Diag::Whole,
               G.Int ? "saved_tensors_hooks int=1 needs ints=[pack id, "
                       "unpack id]"
                     : "saved_tensors_hooks int=0 takes no ints");
    } else if (G.Kind != GuardKind::RangeIteratorMatch && !G.Ints.empty())
      report(Diag::Guard, I, Diag::Whole, Twine(Kind) + " takes no ints");
    if (G.Kind == GuardKind::CowTensorMatch && G.Int != 0 && G.Int != 1)
      report(Diag::Guard, I, Diag::Whole,
             "cow_tensor_match needs int=0 (not copy-on-write) or int=1 "
             "(copy-on-write), got " +
                 Twine(G.Int));
    if (G.Kind == GuardKind::StorageOverlapping &&
        (G.Int < 0 || static_cast<uint64_t>(G.Int) > N))
      report(Diag::Guard, I, Diag::Whole,
             "storage_overlapping needs int=K with 0 <= K <= " + Twine(N) +
                 " (the overlapping operands come first), got " +
                 Twine(G.Int));
    if (G.Kind == GuardKind::ShapeExpr) {
      std::vector<ShapeType> Types;
      size_t Bad = 0;
      std::string Msg = inferShapeExprTypes(G.Expr, N, Types, &Bad);
      if (!Msg.empty())
        report(Diag::Guard, I, G.Expr.empty() ? Diag::Whole : Diag::ExprNode,
               G.Expr.empty() ? Twine("shape_expr needs expr=(...)")
                              : Twine(Msg),
               static_cast<uint32_t>(Bad));
    } else if (!G.Expr.empty()) {
      report(Diag::Guard, I, Diag::Whole, Twine(Kind) + " takes no expr");
    }
    if (G.Kind == GuardKind::GlobalState && G.Str.empty())
      report(Diag::Guard, I, Diag::Whole,
             "global_state needs str=\"...\" (GlobalStateGuard's JSON state)");
  }

  const GuardSet &S;
  llvm::function_ref<void(const Diag &)> Report;
  bool Ok = true;
};

} // namespace

bool guardjit::verifyGuardSet(const GuardSet &S,
                              llvm::function_ref<void(const Diag &)> Report) {
  return Checker(S, Report).run();
}

llvm::Error guardjit::verifyGuardSet(const GuardSet &S) {
  std::string Msg;
  verifyGuardSet(S, [&](const Diag &D) {
    if (!Msg.empty())
      Msg += '\n';
    Msg += "guard set '" + S.name() + "': ";
    switch (D.Entity) {
    case Diag::Set:
      break;
    case Diag::Object:
      Msg += "object #" + std::to_string(D.Index) + ": ";
      break;
    case Diag::TensorSpec:
      Msg += "tensor spec " + std::to_string(D.Index) + ": ";
      break;
    case Diag::Value:
      Msg += "value %" + std::to_string(D.Index) + " (" +
             std::string(spelling(S.value(D.Index).Kind)) + "): ";
      break;
    case Diag::Guard:
      Msg += "guard " + std::to_string(D.Index) + " (" +
             std::string(spelling(S.guards()[D.Index].Kind)) + "): ";
      break;
    }
    Msg += D.Message;
  });
  if (Msg.empty())
    return llvm::Error::success();
  return llvm::createStringError(llvm::inconvertibleErrorCode(), Msg);
}

bool guardjit::verifyGuardSet(const GuardSet &S, const GuardSetLocs &Locs,
                              llvm::SourceMgr &SM) {
  return verifyGuardSet(S, [&](const Diag &D) {
    const std::vector<EntityLoc> *Entities = nullptr;
    switch (D.Entity) {
    case Diag::Set:
      break;
    case Diag::Object:
      Entities = &Locs.Objects;
      break;
    case Diag::TensorSpec:
      Entities = &Locs.TensorSpecs;
      break;
    case Diag::Value:
      Entities = &Locs.Values;
      break;
    case Diag::Guard:
      Entities = &Locs.Guards;
      break;
    }
    llvm::SMLoc Loc = Locs.Set;
    if (Entities && D.Index < Entities->size()) {
      const EntityLoc &E = (*Entities)[D.Index];
      switch (D.Field) {
      case Diag::Whole:
        Loc = E.Start;
        break;
      case Diag::Operand:
        Loc = E.operand(D.OperandIndex);
        break;
      case Diag::ObjectRef:
        Loc = E.at(E.Object);
        break;
      case Diag::AuxRef:
        Loc = E.at(E.Aux);
        break;
      case Diag::TensorRef:
        Loc = E.at(E.Tensor);
        break;
      case Diag::OriginRef:
        Loc = E.at(E.Origin);
        break;
      case Diag::ExprNode:
        Loc = D.OperandIndex < E.ExprNodes.size()
                  ? E.at(E.ExprNodes[D.OperandIndex])
                  : E.Start;
        break;
      }
    }
    SM.PrintMessage(Loc, llvm::SourceMgr::DK_Error, D.Message);
  });
}
