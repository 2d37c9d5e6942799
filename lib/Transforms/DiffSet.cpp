//===- DiffSet.cpp - Differentiating guard sets of one code object --------===//
//
// Steps per code object: (1) model each unit: value paths, checks (guards
// and guard-less leaf reads) with cross-unit identity keys; (2) per ordered
// pair (i, j): the contradiction candidates C_ij and the difference D_ij;
// (3) per unit: the policy's seed, then the smallest hitting set (branch and
// bound, greedy past the node budget); (4) the reduced set: kept guards, the
// values they read and their parents, compacted tables.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Transforms/DiffSet.h"

#include "Rewrite.h"

#include "guardjit/IR/KindFacts.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>

using namespace guardjit;
using llvm::StringRef;

std::string_view guardjit::spelling(DiffSetPolicy P) {
  switch (P) {
  case DiffSetPolicy::TorchCompatible:
    return "torch-compatible";
  case DiffSetPolicy::Minimal:
    return "minimal";
  case DiffSetPolicy::GuardedMinimal:
    return "guarded-minimal";
  }
  return "torch-compatible";
}

std::optional<DiffSetPolicy> guardjit::parseDiffSetPolicy(std::string_view S) {
  for (DiffSetPolicy P : {DiffSetPolicy::TorchCompatible, DiffSetPolicy::Minimal,
                          DiffSetPolicy::GuardedMinimal})
    if (S == spelling(P))
      return P;
  return std::nullopt;
}

MultiSetPass::~MultiSetPass() = default;

DiffSetPass::DiffSetPass(StringRef Param)
    : Policy(Param.empty() ? DiffSetPolicy::TorchCompatible
                           : parseDiffSetPolicy(std::string_view(Param))
                                 .value_or(DiffSetPolicy::TorchCompatible)),
      NodeBudget(DefaultNodeBudget) {}

void DiffSetPass::printPipeline(llvm::raw_ostream &OS) const {
  OS << Name << '<' << spelling(Policy) << '>';
}

namespace {

//===----------------------------------------------------------------------===//
// 1. Cross-unit identities
//===----------------------------------------------------------------------===//

/// Interns identity strings of paths and checks across all units.
class Interner {
public:
  uint32_t get(std::string Key) {
    auto [It, New] = Ids.try_emplace(std::move(Key), uint32_t(Ids.size()));
    return It->second;
  }

private:
  std::map<std::string, uint32_t> Ids;
};

/// Rank of a guard-less leaf read among the kinds' ranks (Guards.def
/// `DiffRank`: cheaper kinds first).
constexpr unsigned ReadRank = 2;

/// One check of a unit: a guard, or the read of a guard-less leaf value.
struct Check {
  bool IsRead = false;
  uint32_t Index = 0; ///< guard index, or value id for a read
  uint32_t Key = 0;   ///< cross-unit identity (Interner)
  unsigned Rank = 0;
};

/// A unit as the search sees it.
struct UnitModel {
  const GuardSet *S = nullptr;
  size_t Unit = 0;
  std::vector<uint32_t> PathOf; ///< value id -> path id
  std::vector<Check> Checks;    ///< guards first (Checks[g] is guard g)
  std::vector<uint32_t> SortedKeys;
  /// Single-operand guards (as check indices) on each path.
  std::map<uint32_t, std::vector<uint32_t>> OnPath;
  std::vector<uint32_t> RootGuards; ///< zero-operand guards
};

class Identity {
public:
  Identity(const PassContext &Ctx) : Facts(Ctx.Facts) {}

  /// Object identity: the address when bound, else (kind, repr). Callables
  /// in parsed text are never identical across units: a repr does not say
  /// what a function does.
  std::string object(const UnitModel &U, ObjectId Id) const {
    if (Id == InvalidId)
      return "-";
    const ObjectEntry &E = U.S->object(Id);
    if (E.Address)
      return "@" + llvm::utohexstr(E.Address);
    if (E.Kind == ObjectKind::Callable)
      return "!" + std::to_string(U.Unit) + "." + std::to_string(Id);
    return "=" + std::string(spelling(E.Kind)) + ":" + E.Repr;
  }

  std::string dims(const std::vector<std::optional<int64_t>> &D) const {
    std::string Out = "[";
    for (const std::optional<int64_t> &X : D)
      Out += (X ? std::to_string(*X) : "?") + ",";
    return Out + "]";
  }

  std::string tensor(const UnitModel &U, uint32_t Id) const {
    if (Id == InvalidId)
      return "-";
    const TensorSpec &T = U.S->tensorSpec(Id);
    return object(U, T.PyType) + "|" + std::to_string(T.DispatchKeys) + "|" +
           std::to_string(T.DType) + "|" + std::to_string(T.DeviceIndex) +
           "|" + std::to_string(T.RequiresGrad) + "|" + dims(T.Sizes) + "|" +
           dims(T.Strides);
  }

  std::string guard(const UnitModel &U, const Guard &G) const {
    std::string K = "G" + std::to_string(unsigned(G.Kind)) + "(";
    for (ValueId Op : G.Operands)
      K += std::to_string(U.PathOf[Op]) + ",";
    K += ")";
    switch (diffCompare(G.Kind)) {
    case DiffCompare::CompareStateJson:
      // The check compares the current state with the saved one, all of
      // whose compared fields are the JSON (guard-semantics.md §6; the
      // runtime builds its payload from Str alone).
      return K + "s=" + G.Str;
    case DiffCompare::CompareShapeExpr:
      // The fallback is compiled from the code part (verbose) and only runs
      // where int64/double cannot decide (guard-semantics.md §11): the same
      // expression, operands and code part answer alike.
      return K + "e=" + printShapeExpr(G.Expr) + "|f=" +
             (G.Object == InvalidId ? "-" : G.Attrs.VerboseCode);
    default:
      break;
    }
    K += "o=" + object(U, G.Object) + "|a=" + object(U, G.Aux) +
         "|i=" + std::to_string(G.Int) + "|I=";
    for (int64_t X : G.Ints)
      K += std::to_string(X) + ",";
    K += "|s=" + G.Str + "|t=" + tensor(U, G.Tensor);
    if (!G.Expr.empty())
      K += "|e=" + printShapeExpr(G.Expr);
    return K;
  }

  std::string path(const UnitModel &U, const Value &V) const {
    return std::to_string(U.PathOf[V.Parent]) + "/" +
           std::to_string(unsigned(V.Kind)) + "/" + V.Name + "/" +
           std::to_string(V.Index) + "/" + object(U, V.Key);
  }

  const ObjectFacts &Facts;
};

UnitModel buildModel(const GuardSet &S, size_t Unit, const Identity &Id,
                     Interner &Paths, Interner &Keys) {
  UnitModel U;
  U.S = &S;
  U.Unit = Unit;
  U.PathOf.resize(S.values().size());
  U.PathOf[GuardSet::root()] = Paths.get("L");
  for (ValueId V = 1; V < S.values().size(); ++V)
    U.PathOf[V] = Paths.get(Id.path(U, S.value(V)));
  const std::vector<Guard> &Gs = S.guards();
  for (uint32_t I = 0; I < Gs.size(); ++I) {
    Check C;
    C.Index = I;
    C.Key = Keys.get(Id.guard(U, Gs[I]));
    C.Rank = diffRank(Gs[I].Kind);
    U.Checks.push_back(C);
    if (Gs[I].Operands.size() == 1 && guardArity(Gs[I].Kind) == 1)
      U.OnPath[U.PathOf[Gs[I].Operands[0]]].push_back(I);
    else if (Gs[I].Operands.empty())
      U.RootGuards.push_back(I);
  }
  ValueUses Uses = computeUses(S);
  for (ValueId V = 1; V < S.values().size(); ++V)
    if (!Uses.GuardUses[V] && !Uses.Children[V]) {
      Check C;
      C.IsRead = true;
      C.Index = V;
      C.Key = Keys.get("R" + std::to_string(U.PathOf[V]));
      C.Rank = ReadRank;
      U.Checks.push_back(C);
    }
  for (const Check &C : U.Checks)
    U.SortedKeys.push_back(C.Key);
  llvm::sort(U.SortedKeys);
  return U;
}

//===----------------------------------------------------------------------===//
// 2. Contradictions (docs/diffsets.md proves each rule)
//===----------------------------------------------------------------------===//

/// An object proven equal / different across two units, or unknown.
enum class Same { Yes, No, Unknown };

class Contradictions {
public:
  Contradictions(const Identity &Id) : Id(Id), F(Id.Facts) {}

  /// Whether no input passes both `A` (of unit `UA`) and `B` (of `UB`), two
  /// single-operand guards on the same path or two root guards.
  bool contradict(const UnitModel &UA, const Guard &A, const UnitModel &UB,
                  const Guard &B) const {
    // Two guards that pin the value to different objects.
    std::optional<std::string> IA = pinnedIdentity(UA, A),
                               IB = pinnedIdentity(UB, B);
    if (provenDifferent(IA, IB))
      return true;
    // NOT_NONE against a guard pinning the value to None.
    std::string None = singleton(F.None, "None");
    if ((valuePin(A.Kind) == ValuePin::PinNotNone && IB && *IB == None) ||
        (valuePin(B.Kind) == ValuePin::PinNotNone && IA && *IA == None))
      return true;
    // Two guards that pin the value's exact type to different types.
    if (provenDifferent(pinnedType(UA, A), pinnedType(UB, B)))
      return true;
    if (equalsRejectsSingleton(UA, A, B) || equalsRejectsSingleton(UB, B, A))
      return true;
    if (A.Kind != B.Kind)
      return false;
    switch (diffCompare(A.Kind)) {
    case DiffCompare::CompareTensorSpec:
      return tensorsContradict(UA.S->tensorSpec(A.Tensor),
                               UB.S->tensorSpec(B.Tensor));
    case DiffCompare::CompareInt:
      return A.Int != B.Int;
    case DiffCompare::CompareMembership:
      return (A.Int != 0) != (B.Int != 0) &&
             Id.object(UA, A.Object) == Id.object(UB, B.Object);
    case DiffCompare::CompareStateJson:
      return globalStatesContradict(A.Str, B.Str);
    case DiffCompare::CompareFields:
    case DiffCompare::CompareShapeExpr:
      return false;
    }
    return false;
  }

private:
  /// The identity string of a singleton: its address when known, else its
  /// name.
  static std::string singleton(uintptr_t Addr, const char *Name) {
    return Addr ? "@" + llvm::utohexstr(Addr)
                : std::string("=singleton:") + Name;
  }

  /// Identity strings start with their domain: '@' an address, '=' a
  /// description of parsed text. Only two of one domain are comparable;
  /// '!' (a parsed callable) is never.
  static bool provenDifferent(const std::optional<std::string> &A,
                              const std::optional<std::string> &B) {
    if (!A || !B || A->empty() || B->empty() || (*A)[0] != (*B)[0] ||
        (*A)[0] == '!')
      return false;
    if ((*A)[0] == '=') {
      // Parsed text: compare within one sub-domain ("=singleton:",
      // "=idmatch:", "=type:"...), up to the second ':'.
      size_t PA = A->find(':'), PB = B->find(':');
      if (A->compare(0, PA, *B, 0, PB) != 0)
        return false;
    }
    return *A != *B;
  }

  /// The object a passing value must be, as an identity string: ID_MATCH's
  /// object; None / True / False for NONE/TRUE/FALSE_MATCH (their addresses
  /// when known, so that ID_MATCH(None) and NONE_MATCH agree).
  std::optional<std::string> pinnedIdentity(const UnitModel &U,
                                            const Guard &G) const {
    switch (valuePin(G.Kind)) {
    case ValuePin::PinNone:
      return singleton(F.None, "None");
    case ValuePin::PinTrue:
      return singleton(F.True, "True");
    case ValuePin::PinFalse:
      return singleton(F.False, "False");
    case ValuePin::PinIdentity: {
      const ObjectEntry &E = U.S->object(G.Object);
      // Parsed text: an ID_MATCH object's repr says nothing about whether it
      // is one of the singletons, so it is comparable with other ID_MATCHes
      // (by repr) but not with NONE/TRUE/FALSE_MATCH.
      if (!E.Address)
        return "=idmatch:" + std::string(spelling(E.Kind)) + ":" + E.Repr;
      return "@" + llvm::utohexstr(E.Address);
    }
    default:
      return std::nullopt;
    }
  }

  /// EQUALS_MATCH(c) against NONE/TRUE/FALSE_MATCH(s) when c is not s.
  /// NoneType's one instance is None and bool's only two are True and False
  /// (neither type can be subclassed or instantiated anew), so a value that
  /// is s either is not c and has type(s) only if c is s's sibling, which ==
  /// tells apart (True != False), or type(c) is not type(s): EQUALS_MATCH(c)
  /// rejects it (guard-semantics.md §4). "c is not s": by address when
  /// bound; in text by repr, which is sound here because repr(None),
  /// repr(True) and repr(False) are fixed: a repr other than "None" is never
  /// None's.
  bool equalsRejectsSingleton(const UnitModel &U, const Guard &E,
                              const Guard &S) const {
    if (valuePin(E.Kind) != ValuePin::PinEqual)
      return false;
    uintptr_t Addr;
    const char *Repr;
    switch (valuePin(S.Kind)) {
    case ValuePin::PinNone:
      Addr = F.None, Repr = "None";
      break;
    case ValuePin::PinTrue:
      Addr = F.True, Repr = "True";
      break;
    case ValuePin::PinFalse:
      Addr = F.False, Repr = "False";
      break;
    default:
      return false;
    }
    const ObjectEntry &C = U.S->object(E.Object);
    if (C.Address)
      return Addr && C.Address != Addr;
    return C.Repr != Repr;
  }

  /// The exact type a passing value must have, as an identity string.
  std::optional<std::string> pinnedType(const UnitModel &U,
                                        const Guard &G) const {
    switch (valuePin(G.Kind)) {
    case ValuePin::PinExactType:
      return Id.object(U, G.Object);
    case ValuePin::PinTensorType:
      // TensorCheck first tests Py_TYPE(v) == pytype (guard-semantics.md §5).
      return Id.object(U, U.S->tensorSpec(G.Tensor).PyType);
    case ValuePin::PinIdentity:
    case ValuePin::PinEqual:
      // ID_MATCH: v is o. EQUALS_MATCH: v is c, or type(v) is type(c) and
      // v == c (§4). Either way type(v) is type(o) when that type is fixed.
      return fixedType(U.S->object(G.Object).Address);
    case ValuePin::PinNone:
      return fixedType(F.None);
    case ValuePin::PinTrue:
      return fixedType(F.True);
    case ValuePin::PinFalse:
      return fixedType(F.False);
    default:
      return std::nullopt;
    }
  }

  std::optional<std::string> fixedType(uintptr_t Addr) const {
    if (!Addr || !F.FixedTypeOf)
      return std::nullopt;
    uintptr_t T = F.FixedTypeOf(Addr);
    if (!T)
      return std::nullopt;
    return "@" + llvm::utohexstr(T);
  }

  static bool tensorsContradict(const TensorSpec &A, const TensorSpec &B) {
    // The pytype is compared by pinnedType. The rest is TensorCheck::check:
    // each field is compared for equality with the one tensor's value.
    if (A.DispatchKeys != B.DispatchKeys || A.DType != B.DType ||
        A.DeviceIndex != B.DeviceIndex || A.RequiresGrad != B.RequiresGrad ||
        A.Sizes.size() != B.Sizes.size())
      return true;
    for (size_t I = 0; I < A.Sizes.size(); ++I)
      if (A.Sizes[I] && B.Sizes[I] && *A.Sizes[I] != *B.Sizes[I])
        return true;
    // Strides are compared against the same vector on both sides (sparse
    // compressed layouts: -1s), so two static strides that differ cannot
    // both match.
    for (size_t I = 0; I < A.Strides.size() && I < B.Strides.size(); ++I)
      if (A.Strides[I] && B.Strides[I] && *A.Strides[I] != *B.Strides[I])
        return true;
    return false;
  }

  /// GlobalStateGuard::check compares every field with the current state
  /// (guard-semantics.md §6): two saved states that differ in a plainly
  /// compared field, or in whether autocast is enabled on a device, or in
  /// the dtype of a device enabled in both, cannot both match.
  static bool globalStatesContradict(StringRef A, StringRef B) {
    llvm::Expected<llvm::json::Value> JA = llvm::json::parse(A),
                                      JB = llvm::json::parse(B);
    if (!JA || !JB) {
      llvm::consumeError(JA.takeError());
      llvm::consumeError(JB.takeError());
      return false;
    }
    const llvm::json::Object *OA = JA->getAsObject(), *OB = JB->getAsObject();
    if (!OA || !OB)
      return false;
    static const char *const Plain[] = {
        "grad_mode",         "torch_function",
        "torch_function_all_disabled", "deterministic_algorithms",
        "deterministic_algorithms_warn_only", "allow_tf32",
        "allow_fp16_reduce", "allow_bf16_reduce",
        "num_threads",       "default_dtype"};
    for (const char *K : Plain) {
      const llvm::json::Value *VA = OA->get(K), *VB = OB->get(K);
      if (VA && VB && *VA != *VB)
        return true;
    }
    const llvm::json::Object *AA = OA->getObject("autocast_state"),
                             *AB = OB->getObject("autocast_state");
    if (!AA || !AB)
      return false;
    const llvm::json::Value *CA = AA->get("cached_enabled"),
                            *CB = AB->get("cached_enabled");
    if (CA && CB && *CA != *CB)
      return true;
    const llvm::json::Array *EA = AA->getArray("enabled"),
                            *EB = AB->getArray("enabled"),
                            *DA = AA->getArray("dtype"),
                            *DB = AB->getArray("dtype");
    if (!EA || !EB || EA->size() != EB->size())
      return false;
    for (size_t I = 0; I < EA->size(); ++I) {
      std::optional<bool> X = (*EA)[I].getAsBoolean(),
                          Y = (*EB)[I].getAsBoolean();
      if (!X || !Y)
        return false;
      if (*X != *Y)
        return true;
      if (*X && DA && DB && I < DA->size() && I < DB->size() &&
          (*DA)[I] != (*DB)[I])
        return true;
    }
    return false;
  }

  const Identity &Id;
  const ObjectFacts &F;
};

//===----------------------------------------------------------------------===//
// 3. The hitting problem of one unit
//===----------------------------------------------------------------------===//

/// Pair (i, j): satisfied when R meets C or contains D.
struct Requirement {
  size_t Other = 0;           ///< j
  std::vector<uint32_t> C;    ///< contradiction checks, sorted by preference
  std::vector<uint32_t> D;    ///< difference checks
};

class HittingSet {
public:
  HittingSet(const UnitModel &U, std::vector<Requirement> Reqs,
             const std::vector<uint8_t> &Seed, size_t Budget)
      : U(U), Reqs(std::move(Reqs)), In(Seed.size(), 0), Budget(Budget) {
    InC.assign(this->Reqs.size(), 0);
    Uses.resize(Seed.size());
    for (size_t R = 0; R < this->Reqs.size(); ++R) {
      MissingD.push_back(this->Reqs[R].D.size());
      for (uint32_t C : this->Reqs[R].C)
        Uses[C].push_back({uint32_t(R), true});
      for (uint32_t D : this->Reqs[R].D)
        Uses[D].push_back({uint32_t(R), false});
    }
    for (uint32_t C = 0; C < Seed.size(); ++C)
      if (Seed[C])
        add(C);
  }

  /// Solves; returns whether the answer is exact (a smallest one over the
  /// seed).
  bool solve() {
    if (openCount() == 0)
      return true;
    std::vector<uint8_t> Start = In;
    greedy();
    Best = In;
    BestCost = Cost;
    reset(Start);
    search();
    reset(Best);
    return !Aborted;
  }

  const std::vector<uint8_t> &chosen() const { return In; }
  size_t nodes() const { return Nodes; }
  size_t size() const { return Reqs.size(); }
  bool satisfied(size_t R) const { return InC[R] || !MissingD[R]; }
  bool byContradiction(size_t R) const { return InC[R] != 0; }

private:
  void add(uint32_t C) {
    assert(!In[C]);
    In[C] = 1;
    ++Cost;
    for (auto [R, IsC] : Uses[C])
      IsC ? ++InC[R] : --MissingD[R];
  }
  void remove(uint32_t C) {
    assert(In[C]);
    In[C] = 0;
    --Cost;
    for (auto [R, IsC] : Uses[C])
      IsC ? --InC[R] : ++MissingD[R];
  }
  void reset(const std::vector<uint8_t> &To) {
    for (uint32_t C = 0; C < In.size(); ++C)
      if (In[C] != To[C])
        To[C] ? add(C) : remove(C);
  }
  size_t openCount() const {
    size_t N = 0;
    for (size_t R = 0; R < Reqs.size(); ++R)
      N += !satisfied(R);
    return N;
  }
  std::vector<uint32_t> missing(const Requirement &R) const {
    std::vector<uint32_t> M;
    for (uint32_t D : R.D)
      if (!In[D])
        M.push_back(D);
    return M;
  }

  /// Greedy set cover with marginal costs: the option (one contradiction
  /// check, or the missing part of one D) with the most newly satisfied
  /// requirements per added check; then drop checks no longer needed.
  void greedy() {
    std::vector<uint32_t> Added;
    std::vector<uint8_t> Seen(In.size(), 0);
    while (size_t Open = openCount()) {
      std::vector<uint32_t> BestAdd;
      size_t BestGain = 0;
      unsigned BestRank = ~0u;
      auto Consider = [&](std::vector<uint32_t> Add) {
        if (Add.empty())
          return;
        for (uint32_t C : Add)
          add(C);
        size_t Gain = Open - openCount();
        for (uint32_t C : Add)
          remove(C);
        unsigned Rank = Add.size() == 1 ? U.Checks[Add[0]].Rank : ~1u;
        // Gain / |Add| > BestGain / |BestAdd|, cross-multiplied; on a tie
        // the lower rank, else the earlier option, stays.
        size_t L = Gain * (BestAdd.empty() ? 1 : BestAdd.size()),
               Rt = BestGain * Add.size();
        if (BestAdd.empty() || L > Rt || (L == Rt && Rank < BestRank)) {
          BestAdd = std::move(Add);
          BestGain = Gain;
          BestRank = Rank;
        }
      };
      std::fill(Seen.begin(), Seen.end(), 0);
      for (size_t R = 0; R < Reqs.size(); ++R)
        if (!satisfied(R))
          for (uint32_t C : Reqs[R].C)
            if (!In[C] && !Seen[C]) {
              Seen[C] = 1;
              Consider({C});
            }
      for (size_t R = 0; R < Reqs.size(); ++R)
        if (!satisfied(R))
          Consider(missing(Reqs[R]));
      for (uint32_t C : BestAdd) {
        add(C);
        Added.push_back(C);
      }
    }
    // Reverse delete: a check whose removal leaves every requirement
    // satisfied is dropped (the seed is never touched).
    for (size_t K = Added.size(); K-- > 0;) {
      remove(Added[K]);
      if (openCount())
        add(Added[K]);
    }
  }

  /// Branch and bound: branch on the open requirement with the fewest
  /// options, over its contradiction checks (cheapest first) and its D.
  void search() {
    if (++Nodes > Budget) {
      Aborted = true;
      return;
    }
    const Requirement *Pick = nullptr;
    for (size_t R = 0; R < Reqs.size(); ++R)
      if (!satisfied(R) && (!Pick || Reqs[R].C.size() < Pick->C.size()))
        Pick = &Reqs[R];
    if (!Pick) {
      if (Cost < BestCost) {
        BestCost = Cost;
        Best = In;
      }
      return;
    }
    if (Cost + 1 >= BestCost)
      return;
    for (uint32_t C : Pick->C) {
      if (In[C])
        continue;
      add(C);
      search();
      remove(C);
      if (Aborted)
        return;
    }
    std::vector<uint32_t> Missing = missing(*Pick);
    if (Cost + Missing.size() >= BestCost)
      return;
    for (uint32_t D : Missing)
      add(D);
    search();
    for (uint32_t D : Missing)
      remove(D);
  }

  const UnitModel &U;
  std::vector<Requirement> Reqs;
  std::vector<uint8_t> In, Best;
  /// Per requirement: chosen contradiction checks, D checks not chosen.
  std::vector<uint32_t> InC, MissingD;
  /// Per check: the requirements it is in (true: in C, false: in D).
  std::vector<std::vector<std::pair<uint32_t, bool>>> Uses;
  size_t Cost = 0, BestCost = 0;
  size_t Budget, Nodes = 0;
  bool Aborted = false;
};

//===----------------------------------------------------------------------===//
// 4. The reduced set
//===----------------------------------------------------------------------===//

/// Whether a TENSOR_MATCH is on an nn.Parameter (torch leaves those out of
/// diff_guard_sources): the recorder's origin says so, or the spec's pytype.
bool isParameterMatch(const GuardSet &S, const Guard &G) {
  if (G.Origin != InvalidId && S.origins()[G.Origin].ValueIsParameter)
    return true;
  const ObjectEntry &T = S.object(S.tensorSpec(G.Tensor).PyType);
  return T.Repr == "<class 'torch.nn.parameter.Parameter'>";
}

/// torch's seed (collect_diff_guard_sources + clone_with_chosen_sources in
/// torch/_dynamo/guards.py): every guard on the value of a non-Parameter
/// TENSOR_MATCH (its manager is cloned with all its leaf guards), and the
/// root's epilogue guards, which the clone keeps (SHAPE_ENV among them).
std::vector<uint8_t> torchSeed(const UnitModel &U) {
  const GuardSet &S = *U.S;
  std::vector<uint8_t> TensorValue(S.values().size(), 0);
  for (const Guard &G : S.guards())
    if (G.Kind == GuardKind::TensorMatch && !isParameterMatch(S, G))
      TensorValue[G.Operands[0]] = 1;
  std::vector<uint8_t> Seed(U.Checks.size(), 0);
  for (uint32_t I = 0; I < S.guards().size(); ++I) {
    const Guard &G = S.guards()[I];
    bool Keep = G.Kind == GuardKind::ShapeExpr ||
                G.Kind == GuardKind::EpilogueLambda;
    for (ValueId Op : G.Operands)
      Keep |= TensorValue[Op] != 0;
    Seed[I] = Keep;
  }
  return Seed;
}

/// Renumbers the object table, tensor specs and origins to those still used.
void compactTables(GuardSet &S) {
  std::vector<uint8_t> UsedObj(S.objects().size(), 0),
      UsedSpec(S.tensorSpecs().size(), 0), UsedOrigin(S.origins().size(), 0);
  auto Obj = [&](ObjectId Id) {
    if (Id != InvalidId)
      UsedObj[Id] = 1;
  };
  for (const Value &V : S.values()) {
    Obj(V.Key);
    if (V.Origin != InvalidId)
      UsedOrigin[V.Origin] = 1;
  }
  for (const Guard &G : S.guards()) {
    Obj(G.Object);
    Obj(G.Aux);
    if (G.Tensor != InvalidId)
      UsedSpec[G.Tensor] = 1;
    if (G.Origin != InvalidId)
      UsedOrigin[G.Origin] = 1;
  }
  for (size_t I = 0; I < S.tensorSpecs().size(); ++I)
    if (UsedSpec[I])
      Obj(S.tensorSpecs()[I].PyType);
  auto Renumber = [](const std::vector<uint8_t> &Used) {
    std::vector<uint32_t> New(Used.size(), InvalidId);
    uint32_t Next = 0;
    for (size_t I = 0; I < Used.size(); ++I)
      if (Used[I])
        New[I] = Next++;
    return New;
  };
  std::vector<uint32_t> NObj = Renumber(UsedObj), NSpec = Renumber(UsedSpec),
                        NOrigin = Renumber(UsedOrigin);
  auto Map = [](const std::vector<uint32_t> &N, uint32_t &Id) {
    if (Id != InvalidId)
      Id = N[Id];
  };
  for (Value &V : S.values()) {
    Map(NObj, V.Key);
    Map(NOrigin, V.Origin);
  }
  for (Guard &G : S.guards()) {
    Map(NObj, G.Object);
    Map(NObj, G.Aux);
    Map(NSpec, G.Tensor);
    Map(NOrigin, G.Origin);
  }
  for (TensorSpec &T : S.tensorSpecs())
    Map(NObj, T.PyType);
  auto Keep = [](auto &Vec, const std::vector<uint8_t> &Used) {
    size_t Out = 0;
    for (size_t I = 0; I < Vec.size(); ++I)
      if (Used[I]) {
        if (Out != I)
          Vec[Out] = std::move(Vec[I]);
        ++Out;
      }
    Vec.resize(Out);
  };
  Keep(S.objects(), UsedObj);
  Keep(S.tensorSpecs(), UsedSpec);
  Keep(S.origins(), UsedOrigin);
}

/// The set of `U` with the chosen checks; for guarded-minimal, the cheap
/// guards and a rank-only copy of each dropped TENSOR_MATCH.
GuardSet reducedSet(const UnitModel &U, const std::vector<uint8_t> &In,
                    DiffSetPolicy Policy) {
  GuardSet Out = *U.S;
  std::vector<Guard> Kept;
  for (uint32_t I = 0; I < Out.guards().size(); ++I) {
    Guard &G = Out.guards()[I];
    if (In[I]) {
      Kept.push_back(std::move(G));
      continue;
    }
    if (Policy != DiffSetPolicy::GuardedMinimal)
      continue;
    switch (diffKeep(G.Kind)) {
    case DiffKeepRule::DiffKeep:
      Kept.push_back(std::move(G));
      break;
    case DiffKeepRule::DiffKeepWithoutSizes: {
      // TensorCheck skips a dim whose size (stride) is nullopt but still
      // compares the rank (guard-semantics.md §5), so this checks pytype,
      // dispatch keys, dtype, device, requires_grad and rank only.
      TensorSpec T = Out.tensorSpec(G.Tensor);
      std::fill(T.Sizes.begin(), T.Sizes.end(), std::nullopt);
      std::fill(T.Strides.begin(), T.Strides.end(), std::nullopt);
      G.Tensor = Out.addTensorSpec(std::move(T));
      Kept.push_back(std::move(G));
      break;
    }
    case DiffKeepRule::DiffDrop:
      break;
    }
  }
  Out.guards() = std::move(Kept);
  // Values: operands of kept guards, kept reads, and their parents.
  size_t N = Out.values().size();
  std::vector<bool> Live(N, false);
  Live[GuardSet::root()] = true;
  for (const Guard &G : Out.guards())
    for (ValueId Op : G.Operands)
      Live[Op] = true;
  for (uint32_t C = U.S->guards().size(); C < U.Checks.size(); ++C)
    if (In[C])
      Live[U.Checks[C].Index] = true;
  for (ValueId V = N; V-- > 1;)
    if (Live[V])
      Live[Out.value(V).Parent] = true;
  std::vector<bool> Dead(N);
  for (size_t V = 0; V < N; ++V)
    Dead[V] = !Live[V];
  std::vector<ValueId> Map(N);
  std::iota(Map.begin(), Map.end(), 0);
  rewriteValues(Out, Map, Dead);
  compactTables(Out);
  return Out;
}

} // namespace

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

std::vector<DiffSetUnit>
DiffSetPass::run(const std::vector<const GuardSet *> &Units,
                 const PassContext &Ctx) const {
  // 1. Models.
  Identity Id(Ctx);
  Interner Paths, Keys;
  std::vector<std::optional<UnitModel>> Models(Units.size());
  for (size_t I = 0; I < Units.size(); ++I)
    if (Units[I])
      Models[I] = buildModel(*Units[I], I, Id, Paths, Keys);
  Contradictions Contra(Id);

  std::vector<DiffSetUnit> Out(Units.size());
  for (size_t I = 0; I < Units.size(); ++I) {
    if (!Models[I])
      continue;
    const UnitModel &U = *Models[I];
    DiffSetUnitStats &St = Out[I].Stats;
    St.GuardsIn = U.S->guards().size();

    // 2. Requirements of each pair (i, j).
    bool AnyOpaque = false;
    std::vector<Requirement> Reqs;
    for (size_t J = 0; J < Units.size(); ++J) {
      if (J == I)
        continue;
      if (!Models[J]) {
        AnyOpaque = true;
        ++St.ByOpaque;
        continue;
      }
      const UnitModel &V = *Models[J];
      Requirement R;
      R.Other = J;
      for (uint32_t C = 0; C < U.Checks.size(); ++C)
        if (!std::binary_search(V.SortedKeys.begin(), V.SortedKeys.end(),
                                U.Checks[C].Key))
          R.D.push_back(C);
      auto Against = [&](uint32_t G, const std::vector<uint32_t> &Others) {
        for (uint32_t H : Others)
          if (Contra.contradict(U, U.S->guards()[G], V, V.S->guards()[H]))
            return true;
        return false;
      };
      for (const auto &[Path, Gs] : U.OnPath) {
        auto It = V.OnPath.find(Path);
        if (It == V.OnPath.end())
          continue;
        for (uint32_t G : Gs)
          if (Against(G, It->second))
            R.C.push_back(G);
      }
      for (uint32_t G : U.RootGuards)
        if (Against(G, V.RootGuards))
          R.C.push_back(G);
      llvm::stable_sort(R.C, [&](uint32_t A, uint32_t B) {
        return std::make_pair(U.Checks[A].Rank, A) <
               std::make_pair(U.Checks[B].Rank, B);
      });
      Reqs.push_back(std::move(R));
    }

    // 3. Seed and search.
    std::vector<uint8_t> In(U.Checks.size(), 0);
    if (AnyOpaque) {
      // Only R_i = G_i rejects every input of a unit whose guards are
      // unknown.
      std::fill(In.begin(), In.end(), 1);
    } else {
      if (Policy == DiffSetPolicy::TorchCompatible)
        In = torchSeed(U);
      St.Seed = std::count(In.begin(), In.end(), 1);
      HittingSet H(U, Reqs, In, NodeBudget);
      St.Exact = H.solve();
      St.Nodes = H.nodes();
      In = H.chosen();
    }
    if (!AnyOpaque) {
      HittingSet Final(U, Reqs, In, 0);
      for (size_t R = 0; R < Final.size(); ++R) {
        assert(Final.satisfied(R) && "the search left a pair uncovered");
        if (Final.byContradiction(R))
          ++St.ByContradiction;
        else
          ++St.ByDifference;
      }
    }

    // 4. The reduced set.
    Out[I].Set = reducedSet(U, In, Policy);
    St.GuardsOut = Out[I].Set->guards().size();
  }
  return Out;
}

void DiffSetPass::run(std::vector<std::optional<GuardSet>> &Units,
                      const PassContext &Ctx,
                      std::vector<PassCounters> *Counters) {
  std::vector<const GuardSet *> In;
  for (const std::optional<GuardSet> &U : Units)
    In.push_back(U ? &*U : nullptr);
  std::vector<DiffSetUnit> Result = run(In, Ctx);
  for (size_t I = 0; I < Units.size(); ++I) {
    const DiffSetUnitStats &S = Result[I].Stats;
    if (Counters)
      Counters->push_back({{"guards_in", int64_t(S.GuardsIn)},
                           {"guards_out", int64_t(S.GuardsOut)},
                           {"seed", int64_t(S.Seed)},
                           {"by_contradiction", int64_t(S.ByContradiction)},
                           {"by_difference", int64_t(S.ByDifference)},
                           {"by_opaque", int64_t(S.ByOpaque)},
                           {"exact", int64_t(S.Exact)},
                           {"nodes", int64_t(S.Nodes)}});
    Units[I] = std::move(Result[I].Set);
  }
}
