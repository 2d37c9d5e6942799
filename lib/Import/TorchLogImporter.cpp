//===- TorchLogImporter.cpp - Guard IR from TORCH_LOGS=guards output ------===//
//
// Steps per tree: (1) GuardTreeReader splits the log into nodes, (2) each
// manager becomes a value and each leaf line a guard (or an opaque lambda
// with a warning), (3) NO_TENSOR_ALIASING operands are resolved by source
// once every manager is known. The text formats are those of torch 2.13's and
// 2.14's torch/_dynamo/guards.py (GuardBuilder's `code` strings,
// get_verbose_code_part) and the accessors' repr() in
// torch/csrc/dynamo/guards.cpp; where the releases differ, both are read.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Import/TorchLogImporter.h"

#include "GuardTreeReader.h"
#include "PythonText.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/SourceMgr.h"

#include <optional>
#include <string>

using namespace guardjit;
using llvm::SMLoc;
using llvm::StringRef;
using llvm::Twine;

namespace {

// TorchTables.def is the build's copy of lib/Import/TorchTables/
// torch-<release>.def, the table of the torch the build targets
// (lib/Import/CMakeLists.txt, docs/porting.md).
std::optional<uint64_t> dispatchKeyBits(StringRef Name) {
  return llvm::StringSwitch<std::optional<uint64_t>>(Name)
#define GJ_DISPATCH_KEY(Name, Bits) .Case(#Name, Bits)
#include "TorchTables.def"
      .Default(std::nullopt);
}

std::optional<int8_t> scalarType(StringRef Name) {
  return llvm::StringSwitch<std::optional<int8_t>>(Name)
#define GJ_DTYPE(Name, Value) .Case(#Name, Value)
#include "TorchTables.def"
      .Default(std::nullopt);
}

/// Accessors whose repr() is just the class name (optionally with `()`).
std::optional<AccessorKind> plainAccessor(StringRef Class) {
  return llvm::StringSwitch<std::optional<AccessorKind>>(Class)
      .Case("GetGenericDictGuardAccessor", AccessorKind::GenericDict)
      .Case("CodeGuardAccessor", AccessorKind::Code)
      .Case("ClosureGuardAccessor", AccessorKind::Closure)
      .Case("FuncDefaultsGuardAccessor", AccessorKind::FuncDefaults)
      .Case("FuncKwDefaultsGuardAccessor", AccessorKind::FuncKwDefaults)
      .Case("TypeGuardAccessor", AccessorKind::Type)
      .Case("TypeDictGuardAccessor", AccessorKind::TypeDict)
      .Case("TypeMROGuardAccessor", AccessorKind::TypeMro)
      .Case("WeakRefCallGuardAccessor", AccessorKind::WeakRefCall)
      .Case("CallFunctionNoArgsGuardAccessor", AccessorKind::CallFunctionNoArgs)
      .Default(std::nullopt);
}

/// Python's repr of a str that needs no escapes.
std::string strRepr(StringRef S) { return ("'" + S + "'").str(); }

/// `Text` for a message: quoted, cut to 80 bytes (the IR keeps all of it).
std::string quoted(StringRef Text) {
  if (Text.size() <= 80)
    return ("'" + Text + "'").str();
  return ("'" + Text.take_front(77) + "...'").str();
}

/// `N` out of `[prefix]N`, as a signed 64-bit integer.
std::optional<int64_t> integer(StringRef S) {
  int64_t V;
  if (S.trim(" ").getAsInteger(10, V))
    return std::nullopt;
  return V;
}

/// One DIMENSION_DYNAMIC_MARKING_GUARD being assembled from its code parts
/// (one printed line each; guards.py builds one C++ guard for all of them).
struct DimensionGroup {
  size_t Guard = 0;  ///< index of the guard in the set
  int Parent = -1;   ///< tree node the guard hangs under
  size_t LastNode = 0;
  std::vector<std::string> Expected, Absent, Dependent; ///< repr items
  llvm::StringSet<> Attrs;
};

class Importer {
public:
  Importer(llvm::SourceMgr &SM, const GuardTree &T) : SM(SM), T(T) {}
  ParsedGuardSet run();

private:
  void warn(SMLoc Loc, const Twine &Msg) {
    SM.PrintMessage(Loc, llvm::SourceMgr::DK_Warning, Msg);
  }
  /// The object table entry for `Repr`, shared by every use of the same
  /// text; `Identity` (an id printed in the log) tells apart objects with
  /// equal reprs, such as two classes of one name.
  ObjectId object(ObjectKind K, bool Strong, StringRef Repr, SMLoc Loc,
                  StringRef Identity = "");
  ValueId addValue(Value V, SMLoc Loc);
  void addGuard(Guard G, SMLoc Loc);

  void importManager(size_t I);
  bool mapAccessor(const TreeNode &N, Value &V);
  void addDictManagerChecks(const TreeNode &N, ValueId V);
  void importLeaf(size_t I);
  /// Reads the guard of leaf `N` into `G` (kind, object, fields); returns a
  /// reason when the text cannot be read.
  std::optional<std::string> readGuard(const TreeNode &N, StringRef Code,
                                       Guard &G);
  std::optional<std::string> readTensorMatch(const TreeNode &N, StringRef Code,
                                             Guard &G);
  bool addDimensionPart(size_t I, StringRef Code, const Guard &Base);
  void flushDimension();
  void addOpaque(const TreeNode &N, ValueId V, bool Epilogue, StringRef Code,
                 const Twine &Why);
  void resolveAliasing();

  /// Value a leaf of node `I` guards, and its source.
  ValueId operandOf(size_t I) const {
    int P = T.Nodes[I].Parent;
    return P < 0 ? 0 : NodeValue[P];
  }
  StringRef sourceOf(ValueId V) const { return P.Set.value(V).Source; }

  llvm::SourceMgr &SM;
  const GuardTree &T;
  ParsedGuardSet P;
  std::vector<ValueId> NodeValue;
  llvm::StringMap<ObjectId> Objects;  ///< kind/strong/repr -> id
  llvm::StringMap<ObjectId> TypeByRepr; ///< first type object of each repr
  llvm::StringMap<ValueId> BySource;  ///< first value read for each source
  llvm::StringSet<> RelationalSeen;   ///< relational guards printed so far
  std::optional<DimensionGroup> Dim;
  struct Aliasing {
    Guard G;
    SMLoc Loc;
    llvm::SmallVector<StringRef, 4> Names;
    StringRef Code; ///< the printed code, for an OBJECT_ALIASING kept opaque
  };
  std::vector<Aliasing> Aliasings;
};

ObjectId Importer::object(ObjectKind K, bool Strong, StringRef Repr, SMLoc Loc,
                          StringRef Identity) {
  std::string Key = (Twine(static_cast<int>(K)) + (Strong ? "s" : "w") +
                     Identity + "#" + Repr)
                        .str();
  auto It = Objects.find(Key);
  if (It != Objects.end())
    return It->second;
  ObjectEntry E;
  E.Kind = K;
  E.Strong = Strong;
  E.Repr = Repr.str();
  ObjectId Id = P.Set.addObject(std::move(E));
  EntityLoc L;
  L.Start = Loc;
  P.Locs.Objects.push_back(L);
  Objects[Key] = Id;
  if (K == ObjectKind::Type)
    TypeByRepr.try_emplace(Repr, Id);
  return Id;
}

ValueId Importer::addValue(Value V, SMLoc Loc) {
  EntityLoc L;
  L.Start = Loc;
  P.Locs.Values.push_back(L);
  BySource.try_emplace(V.Source, static_cast<ValueId>(P.Set.values().size()));
  return P.Set.addValue(std::move(V));
}

void Importer::addGuard(Guard G, SMLoc Loc) {
  EntityLoc L;
  L.Start = Loc;
  P.Locs.Guards.push_back(L);
  P.Set.addGuard(std::move(G));
}

ParsedGuardSet Importer::run() {
  P.Set.setName(T.Name);
  P.Locs.Set = T.Loc;
  // 2. Managers become values, leaves guards, in print order.
  NodeValue.assign(T.Nodes.size(), 0);
  EntityLoc RootLoc;
  RootLoc.Start = T.Nodes[0].Loc;
  P.Locs.Values.push_back(RootLoc);
  BySource.try_emplace("L", 0);
  for (size_t I = 1; I < T.Nodes.size(); ++I) {
    const TreeNode &N = T.Nodes[I];
    if (N.Kind == TreeNode::Leaf) {
      importLeaf(I);
      continue;
    }
    flushDimension();
    if (N.Kind == TreeNode::Manager)
      importManager(I);
    else // a KeyValuePair reads nothing itself: its key/value managers do
      NodeValue[I] = NodeValue[N.Parent];
  }
  flushDimension();
  // 3. Relational guards name managers anywhere in the tree.
  resolveAliasing();
  return std::move(P);
}

void Importer::importManager(size_t I) {
  const TreeNode &N = T.Nodes[I];
  Value V;
  V.Source = N.Source.str();
  if (!N.Role.empty()) {
    // KeyManager / ValueManager of the pair at index=K of the dict above it.
    const TreeNode &Pair = T.Nodes[N.Parent];
    V.Kind = N.Role == "KeyManager" ? AccessorKind::DictKey
                                    : AccessorKind::DictValue;
    V.Parent = NodeValue[Pair.Parent];
    V.Index = Pair.Index;
  } else {
    V.Parent = NodeValue[N.Parent];
    if (!mapAccessor(N, V)) {
      warn(N.AccessorLoc, "accessor " + quoted(N.Accessor) +
                              " has no Guard IR kind; kept as an opaque "
                              "'lambda' accessor described by its text");
      V.Kind = AccessorKind::Lambda;
      V.Name.clear();
      V.Index = -1;
      V.Key = object(ObjectKind::Callable, true, N.Accessor, N.AccessorLoc);
    }
  }
  NodeValue[I] = addValue(std::move(V), N.Loc);
  if (N.isDictManager())
    addDictManagerChecks(N, NodeValue[I]);
}

bool Importer::mapAccessor(const TreeNode &N, Value &V) {
  StringRef A = N.Accessor;
  StringRef Class = A.take_until([](char C) { return C == '('; });
  StringRef Args;
  if (Class.size() < A.size()) {
    auto Call = pytext::callArgs(A, Class);
    if (!Call || !Call->second.empty())
      return false;
    Args = Call->first;
  }
  if (std::optional<AccessorKind> K = plainAccessor(Class)) {
    if (!Args.empty())
      return false;
    V.Kind = *K;
    return true;
  }
  auto Key = [&](StringRef Repr) {
    V.Key = object(ObjectKind::Key, true, Repr, N.AccessorLoc);
  };
  if (Class == "FrameLocalsGuardAccessor") {
    // FrameLocalsGuardAccessor(key='x', framelocals_idx=0)
    auto Parts = pytext::splitArgs(Args);
    if (Parts.size() != 2 || !Parts[0].consume_front("key=") ||
        !Parts[1].consume_front("framelocals_idx="))
      return false;
    std::optional<StringRef> Name = pytext::plainStr(Parts[0]);
    std::optional<int64_t> Idx = integer(Parts[1]);
    if (!Name || !Idx || *Idx < 0)
      return false;
    V.Kind = AccessorKind::FrameLocal;
    V.Name = Name->str();
    V.Index = *Idx;
    Key(Parts[0]);
    return true;
  }
  if (Class == "PythonLambdaGuardAccessor" && Args.empty()) {
    // lambda_manager: the callable (Dynamo's own lambda, e.g. ContextVar.get
    // in 2.14) is not printed; the source says what it reads.
    V.Kind = AccessorKind::Lambda;
    warn(N.AccessorLoc, "the callable of this PythonLambdaGuardAccessor is not "
                        "in the log; imported as an unbound callable described "
                        "by its source");
    V.Key = object(ObjectKind::Callable, true,
                   ("<the Python lambda that reads " + N.Source + ">").str(),
                   N.AccessorLoc);
    return true;
  }
  if (Class == "GlobalsGuardAccessor" && Args.empty()) {
    V.Kind = AccessorKind::Globals;
    warn(N.AccessorLoc, "the globals dict is not in the log; imported as an "
                        "unbound 'dict' object");
    V.Key = object(ObjectKind::Dict, true, "<f_globals of the compiled frame>",
                   N.AccessorLoc);
    return true;
  }
  if (Args.empty())
    return false;
  if (Class == "DictGetItemGuardAccessor" || Class == "GetItemGuardAccessor") {
    // The key's repr: DictGetItemGuardAccessor('a'), GetItemGuardAccessor(0).
    V.Kind = Class == "GetItemGuardAccessor" ? AccessorKind::GetItem
                                             : AccessorKind::DictGetItem;
    if (std::optional<StringRef> S = pytext::plainStr(Args))
      V.Name = S->str();
    Key(Args);
    return true;
  }
  if (Class == "GetAttrGuardAccessor" || Class == "GenericGetAttrGuardAccessor" ||
      Class == "GlobalWeakRefGuardAccessor") {
    // The name as str(): GetAttrGuardAccessor(weight).
    if (Args.contains('\'') || Args.contains('\\'))
      return false;
    // guards.cpp installs GlobalWeakRefGuardAccessor on the globals only.
    if (Class == "GlobalWeakRefGuardAccessor" &&
        P.Set.value(V.Parent).Kind != AccessorKind::Globals)
      return false;
    V.Kind = Class == "GetAttrGuardAccessor"          ? AccessorKind::GetAttr
             : Class == "GenericGetAttrGuardAccessor" ? AccessorKind::GenericGetAttr
                                                      : AccessorKind::GlobalWeakRef;
    V.Name = Args.str();
    Key(strRepr(Args));
    return true;
  }
  if (Class == "SetGetItemGuardAccessor") {
    // SetGetItemGuardAccessor(index=0): the index-th item in iteration order
    // (source `list(S)[0]` in 2.13, `___set_getitem(S, 0)` in 2.14).
    std::optional<int64_t> Idx;
    if (Args.consume_front("index="))
      Idx = integer(Args);
    if (!Idx || *Idx < 0)
      return false;
    V.Kind = AccessorKind::SetGetItem;
    V.Index = *Idx;
    return true;
  }
  if (Class == "TupleGetItemGuardAccessor" || Class == "ListGetItemGuardAccessor") {
    std::optional<int64_t> Idx = integer(Args);
    if (!Idx || *Idx == -1)
      return false;
    V.Kind = Class == "TupleGetItemGuardAccessor" ? AccessorKind::TupleGetItem
                                                  : AccessorKind::ListGetItem;
    V.Index = *Idx;
    return true;
  }
  return false;
}

void Importer::addDictManagerChecks(const TreeNode &N, ValueId V) {
  // DictGuardManager::check_nopybind: exact type, then PyDict_Size against
  // the size it saved, before the key/value managers. The type is printed
  // (type=...), the size is not.
  if (N.Class == "DictGuardManager" && N.Type.starts_with("<class '")) {
    Guard G;
    G.Kind = GuardKind::TypeMatch;
    G.Operands = {V};
    G.Object = object(ObjectKind::Type, false, N.Type, N.Loc);
    G.Attrs.Source = N.Source.str();
    G.Attrs.VerboseCode = ("DictGuardManager: type(" + N.Source + ") is " +
                           N.Type).str();
    addGuard(std::move(G), N.Loc);
    addOpaque(N, V, false, ("len(" + N.Source + ") == <not in the log>").str(),
              N.Class + " checks the dict's size, which the log does not show");
    return;
  }
  addOpaque(N, V, false,
            (N.Class + " type and size checks of " + N.Source).str(),
            "cannot read the checks of " + quoted(N.Class) + " with type " +
                quoted(N.Type));
}

void Importer::addOpaque(const TreeNode &N, ValueId V, bool Epilogue,
                         StringRef Code, const Twine &Why) {
  warn(N.Loc, Why + "; kept as an opaque lambda guard");
  Guard G;
  G.Kind = Epilogue ? GuardKind::EpilogueLambda : GuardKind::Lambda;
  if (!Epilogue)
    G.Operands = {V};
  G.Object = object(ObjectKind::Callable, true, Code.empty() ? N.Text : Code,
                    N.Loc);
  G.Attrs.Source = sourceOf(V).str();
  auto [C, Comment] = pytext::splitComment(N.Body);
  G.Attrs.Loc = pytext::userLoc(Comment);
  G.Attrs.VerboseCode = N.Kind == TreeNode::Leaf
                            ? N.Body.str()
                            : (N.Class + ": " + Code).str();
  addGuard(std::move(G), N.Loc);
}

void Importer::importLeaf(size_t I) {
  const TreeNode &N = T.Nodes[I];
  bool Epilogue = N.Depth == 0;
  ValueId V = operandOf(I);
  if (N.Body.empty()) {
    // A relational guard printed again under another of its managers.
    if (!RelationalSeen.contains(N.GuardName))
      warn(N.Loc, quoted(N.GuardName) + " repeats a relational guard that was "
                                      "not printed before; ignored");
    return;
  }
  auto [Code, Comment] = pytext::splitComment(N.Body);
  Guard G;
  G.Operands = {V};
  G.Attrs.Source = sourceOf(V).str();
  G.Attrs.Loc = pytext::userLoc(Comment);
  G.Attrs.VerboseCode = N.Body.str();

  if (N.GuardName == "DIMENSION_DYNAMIC_MARKING_GUARD" && !Epilogue &&
      addDimensionPart(I, Code, G))
    return;
  flushDimension();

  const TreeNode *Parent = N.Parent < 0 ? nullptr : &T.Nodes[N.Parent];
  bool OnDictManager = Parent && Parent->isDictManager();
  if (OnDictManager &&
      (N.GuardName == "TYPE_MATCH" || N.GuardName == "DICT_LENGTH"))
    return; // DictGuardManager ignores them: it checks type and size itself

  if (Epilogue) {
    // Epilogue guards (the Python shape guard, the aliasing lambda) receive
    // the frame locals; torch installs only lambdas there.
    if (N.GuardName != "LAMBDA_GUARD")
      return addOpaque(N, V, true, Code, "epilogue guard " + quoted(N.GuardName) +
                                             " has no Guard IR kind");
    warn(N.Loc, "the callable of this epilogue LAMBDA_GUARD is not in the "
                "log; imported as an unbound callable described by its code");
    G.Kind = GuardKind::EpilogueLambda;
    G.Operands.clear();
    G.Object = object(ObjectKind::Callable, true, Code, N.BodyLoc);
    return addGuard(std::move(G), N.Loc);
  }
  if (std::optional<std::string> Why = readGuard(N, Code, G))
    return addOpaque(N, V, false, Code, *Why);
  if (G.Kind == GuardKind::NoTensorAliasing ||
      G.Kind == GuardKind::ObjectAliasing)
    return; // resolved at the end (resolveAliasing)
  addGuard(std::move(G), N.Loc);
}

std::optional<std::string> Importer::readGuard(const TreeNode &N, StringRef Code,
                                               Guard &G) {
  StringRef Name = N.GuardName;
  SMLoc Loc = N.BodyLoc;
  StringRef Src = G.Attrs.Source;
  auto Simple = [&](GuardKind K) -> std::optional<std::string> {
    G.Kind = K;
    return std::nullopt;
  };
  // `SRC == VALUE`: the text after the source (a source may contain ' == ').
  auto AfterEquals = [&](StringRef Text) -> std::optional<StringRef> {
    if (Text.consume_front(Src) && Text.consume_front(" == "))
      return Text;
    return std::nullopt;
  };

  if (Name == "TYPE_MATCH" || Name == "ID_MATCH") {
    bool IsType = Name == "TYPE_MATCH";
    auto Call = pytext::callArgs(Code, IsType ? "___check_type_id"
                                              : "___check_obj_id");
    if (!Call)
      return "cannot read " + Name.str() + " " + quoted(Code);
    auto Args = pytext::splitArgs(Call->first);
    StringRef TypeRepr = Call->second;
    if (Args.size() != 2 || !integer(Args[1]) ||
        !TypeRepr.consume_front(", type="))
      return "cannot read " + Name.str() + " " + quoted(Code);
    if (IsType) {
      // The type object is described by its repr, as in any parsed set.
      G.Kind = GuardKind::TypeMatch;
      G.Object = object(ObjectKind::Type, false, TypeRepr, Loc, Args[1]);
      return std::nullopt;
    }
    warn(Loc, "ID_MATCH object is known only by its id in the logging "
              "process; imported as an unbound object");
    G.Kind = GuardKind::IdMatch;
    G.Object = object(ObjectKind::Object, false,
                      ("<object of " + TypeRepr + " with id " + Args[1] +
                       " in the logging process>")
                          .str(),
                      Loc, Args[1]);
    return std::nullopt;
  }
  if (Name == "EQUALS_MATCH") {
    std::optional<StringRef> Repr = AfterEquals(Code);
    if (!Repr || Repr->empty())
      return "cannot read EQUALS_MATCH " + quoted(Code);
    G.Kind = GuardKind::EqualsMatch;
    G.Object = object(ObjectKind::Constant, true, *Repr, Loc);
    return std::nullopt;
  }
  if (Name == "NONE_MATCH" && Code == (Src + " is None").str())
    return Simple(GuardKind::NoneMatch);
  if (Name == "NOT_NONE" && Code == (Src + " is not None").str())
    return Simple(GuardKind::NotNone);
  if (Name == "TRUE_MATCH" && AfterEquals(Code) == StringRef("True"))
    return Simple(GuardKind::TrueMatch);
  if (Name == "FALSE_MATCH" && AfterEquals(Code) == StringRef("False"))
    return Simple(GuardKind::FalseMatch);
  if (Name == "FLOAT_IS_NAN" &&
      Code == ("(type(" + Src + ") is float and __math_isnan(" + Src + "))").str())
    return Simple(GuardKind::FloatIsNan);
  if (Name == "COMPLEX_IS_NAN" &&
      Code == ("(type(" + Src + ") is complex and __numpy_isnan(" + Src + "))").str())
    return Simple(GuardKind::ComplexIsNan);
  if (Name == "LENGTH_CHECK" || Name == "DICT_LENGTH") {
    // SEQUENCE_LENGTH's code: `not S` for 0, else `len(S) == n`; since 2.14
    // `set.__len__(S) == n` / `frozenset.__len__(S) == n` for sets.
    // Only 2.14.1 spells sets so, and its C++ guard then reads a set's size
    // (length_check_set_size); the other spellings keep 2.13's kind, the same
    // on any value that passed the TYPE_MATCH Dynamo puts before it.
    StringRef Rest = Code;
    std::optional<int64_t> Len;
    bool SetSize = false;
    if (Code == ("not " + Src).str())
      Len = 0;
    else if (Rest.consume_front("len(" + Src.str() + ") == "))
      Len = integer(Rest);
    else if (Name == "LENGTH_CHECK" &&
             (Rest.consume_front("set.__len__(" + Src.str() + ") == ") ||
              Rest.consume_front("frozenset.__len__(" + Src.str() + ") == "))) {
      Len = integer(Rest);
      SetSize = true;
    }
    if (!Len || *Len < 0)
      return "cannot read " + Name.str() + " " + quoted(Code);
    G.Kind = Name == "DICT_LENGTH" ? GuardKind::DictLength
             : SetSize             ? GuardKind::LengthCheckSetSize
                                   : GuardKind::LengthCheck;
    G.Int = *Len;
    return std::nullopt;
  }
  if (Name == "DICT_CONTAINS") {
    StringRef Rest = Code;
    bool Negated = Rest.consume_front("not ");
    auto Call = pytext::callArgs(Rest, "___dict_contains");
    auto Args = Call ? pytext::splitArgs(Call->first)
                     : llvm::SmallVector<StringRef, 8>();
    if (!Call || !Call->second.empty() || Args.size() != 2 || Args[0].empty())
      return "cannot read DICT_CONTAINS " + quoted(Code);
    G.Kind = GuardKind::DictContains;
    G.Int = Negated ? 0 : 1;
    G.Object = object(ObjectKind::Key, true, Args[0], Loc);
    return std::nullopt;
  }
  if (Name == "NO_HASATTR") {
    auto Call = pytext::callArgs(Code.drop_front(Code.starts_with("not ") ? 4 : 0),
                                 "hasattr");
    auto Args = Call ? pytext::splitArgs(Call->first)
                     : llvm::SmallVector<StringRef, 8>();
    if (!Code.starts_with("not ") || !Call || !Call->second.empty() ||
        Args.size() != 2 || !pytext::plainStr(Args[1]))
      return "cannot read NO_HASATTR " + quoted(Code);
    G.Kind = GuardKind::NoHasAttr;
    G.Object = object(ObjectKind::Key, true, Args[1], Loc);
    return std::nullopt;
  }
  if (Name == "TENSOR_MATCH")
    return readTensorMatch(N, Code, G);
  if (Name == "GLOBAL_STATE" || Name == "DEFAULT_DEVICE" ||
      Name == "TORCH_FUNCTION_MODE_STACK") {
    if (N.Depth != 1)
      return Name.str() + " outside the root manager";
    G.Operands.clear();
    StringRef Rest = Code;
    if (Name == "GLOBAL_STATE") {
      if (!Rest.consume_front("___check_global_state() against ") || Rest.empty())
        return "cannot read GLOBAL_STATE " + quoted(Code);
      G.Kind = GuardKind::GlobalState;
      G.Str = Rest.str();
      return std::nullopt;
    }
    if (Name == "DEFAULT_DEVICE") {
      if (!Rest.consume_front("utils_device.CURRENT_DEVICE == ") || Rest.empty())
        return "cannot read DEFAULT_DEVICE " + quoted(Code);
      G.Kind = GuardKind::DefaultDevice;
      G.Object = object(ObjectKind::Constant, true, Rest, Loc);
      G.Aux = object(ObjectKind::Dict, true, "torch.utils._device.__dict__", Loc);
      return std::nullopt;
    }
    if (Code != "___check_torch_function_mode_stack()")
      return "cannot read TORCH_FUNCTION_MODE_STACK " + quoted(Code);
    warn(Loc, "the types of the torch function mode stack are not in the "
              "log; imported as an unbound constant");
    G.Kind = GuardKind::TorchFunctionModeStack;
    G.Object = object(ObjectKind::Constant, true,
                      "<types of the torch function mode stack>", Loc);
    return std::nullopt;
  }
  if (Name == "DICT_VERSION") {
    StringRef Rest = Code;
    std::optional<int64_t> Tag;
    if (Rest.consume_front("___dict_version(" + Src.str() + ") == "))
      Tag = integer(Rest);
    if (!Tag)
      return "cannot read DICT_VERSION " + quoted(Code);
    warn(Loc, "DICT_VERSION's tag is the dict version of the logging "
              "process; it will not match in another one");
    G.Kind = GuardKind::DictVersion;
    G.Int = *Tag;
    return std::nullopt;
  }
  if (Name == "LAMBDA_GUARD") {
    warn(Loc, "the callable of this LAMBDA_GUARD is not in the log; imported "
              "as an unbound callable described by its code");
    G.Kind = GuardKind::Lambda;
    G.Object = object(ObjectKind::Callable, true, Code, Loc);
    return std::nullopt;
  }
  if (Name == "NO_TENSOR_ALIASING") {
    auto Call = pytext::callArgs(Code, "check_no_aliasing");
    if (!Call || !Call->second.empty() || Call->first.empty())
      return "cannot read NO_TENSOR_ALIASING " + quoted(Code);
    RelationalSeen.insert(Name);
    G.Kind = GuardKind::NoTensorAliasing;
    G.Attrs.Source = Call->first.str();
    Aliasing A{G, N.Loc, {}, Code};
    A.G.Operands.clear();
    for (StringRef Arg : pytext::splitArgs(Call->first))
      A.Names.push_back(Arg);
    Aliasings.push_back(std::move(A));
    return std::nullopt;
  }
  if (Name == "OBJECT_ALIASING") {
    // DUPLICATE_INPUT with use_lamba_guard_for_object_aliasing off (the 2.14
    // default): `B is A`, installed on A's and B's managers, in that order.
    auto Sides = pytext::splitOperator(Code, "is");
    if (!Sides || Sides->second.starts_with("not "))
      return "cannot read OBJECT_ALIASING " + quoted(Code);
    RelationalSeen.insert(Name);
    G.Kind = GuardKind::ObjectAliasing;
    G.Attrs.Source = (Sides->second + " is " + Sides->first).str();
    Aliasing A{G, N.Loc, {Sides->second, Sides->first}, Code};
    A.G.Operands.clear();
    Aliasings.push_back(std::move(A));
    return std::nullopt;
  }
  bool Known = parseGuardKind(Name.lower()).has_value();
  if (Known)
    return "cannot read " + Name.str() + " " + quoted(Code);
  return "guard kind " + quoted(Name) + " has no Guard IR kind";
}

std::optional<std::string> Importer::readTensorMatch(const TreeNode &N,
                                                     StringRef Code, Guard &G) {
  // check_tensor(SRC, PYTYPE, DispatchKeySet(K, ...), torch.DTYPE,
  //              device=D, requires_grad=B, size=[..], stride=[..])
  auto Fail = [&](const Twine &Why) -> std::optional<std::string> {
    return ("cannot read TENSOR_MATCH: " + Why).str();
  };
  auto Call = pytext::callArgs(Code, "check_tensor");
  if (!Call || !Call->second.empty())
    return Fail("expected 'check_tensor(...)'");
  auto Args = pytext::splitArgs(Call->first);
  if (Args.size() != 8)
    return Fail("expected 8 arguments of check_tensor");
  TensorSpec S;
  // The exact Python type, printed by its __name__.
  StringRef PyType = Args[1];
  std::string TypeRepr;
  if (PyType == "Tensor")
    TypeRepr = "<class 'torch.Tensor'>";
  else if (PyType == "Parameter")
    TypeRepr = "<class 'torch.nn.parameter.Parameter'>";
  else if (!PyType.empty() && llvm::all_of(PyType, [](char C) {
             return llvm::isAlnum(C) || C == '_';
           })) {
    warn(N.BodyLoc, "tensor type " + quoted(PyType) +
                        " is known only by its name; imported as an unbound "
                        "type object");
    TypeRepr = ("<class '" + PyType + "'>").str();
  } else {
    return Fail("unexpected tensor type " + quoted(PyType));
  }
  // The log names the type without its id: the type a TYPE_MATCH printed
  // with the same qualified name, if any.
  auto Known = TypeByRepr.find(TypeRepr);
  S.PyType = Known != TypeByRepr.end()
                 ? Known->second
                 : object(ObjectKind::Type, false, TypeRepr, N.BodyLoc);
  // The dispatch keys TensorCheck stored: LocalState.apply(keys) at compile
  // time, which is what the log prints.
  auto Keys = pytext::callArgs(Args[2], "DispatchKeySet");
  if (!Keys || !Keys->second.empty())
    return Fail("expected 'DispatchKeySet(...)'");
  for (StringRef K : pytext::splitArgs(Keys->first)) {
    std::optional<uint64_t> Bits = dispatchKeyBits(K);
    if (!Bits)
      return Fail("unknown dispatch key " + quoted(K));
    S.DispatchKeys |= *Bits;
  }
  StringRef DType = Args[3];
  std::optional<int8_t> ST;
  if (DType.consume_front("torch."))
    ST = scalarType(DType);
  if (!ST)
    return Fail("unknown dtype " + quoted(Args[3]));
  S.DType = *ST;
  StringRef Device = Args[4], Grad = Args[5], Size = Args[6], Stride = Args[7];
  if (!Device.consume_front("device="))
    return Fail("expected 'device='");
  int64_t Index = -1;
  if (Device != "None" && (Device.getAsInteger(10, Index) || Index < -1 ||
                           Index > INT8_MAX))
    return Fail("unexpected device " + quoted(Device));
  S.DeviceIndex = static_cast<int8_t>(Index);
  if (Grad == "requires_grad=True")
    S.RequiresGrad = true;
  else if (Grad != "requires_grad=False")
    return Fail("expected 'requires_grad=True|False'");
  auto Dims = [&](StringRef Text, StringRef Prefix,
                  std::vector<std::optional<int64_t>> &Out) {
    if (!Text.consume_front(Prefix) || !Text.consume_front("[") ||
        !Text.consume_back("]"))
      return false;
    for (StringRef D : pytext::splitArgs(Text)) {
      if (D == "None") {
        Out.push_back(std::nullopt);
        continue;
      }
      std::optional<int64_t> V = integer(D);
      if (!V)
        return false;
      Out.push_back(*V);
    }
    return true;
  };
  if (!Dims(Size, "size=", S.Sizes) || !Dims(Stride, "stride=", S.Strides))
    return Fail("expected 'size=[...]' and 'stride=[...]' of integers or None");
  G.Kind = GuardKind::TensorMatch;
  G.Tensor = P.Set.addTensorSpec(std::move(S));
  EntityLoc L;
  L.Start = N.BodyLoc;
  P.Locs.TensorSpecs.push_back(L);
  return std::nullopt;
}

bool Importer::addDimensionPart(size_t I, StringRef Code, const Guard &Base) {
  // One part per marking attribute (guards.py, tensor guards):
  //   hasattr(T, 'A') == False
  //   ((getattr(T, 'A', set()).issubset(R)) if hasattr(T, 'A') else True)
  //   ((getattr(T, 'A', None) == R) if hasattr(T, 'G') else True)
  const TreeNode &N = T.Nodes[I];
  std::string Attr, Item;
  enum { Absent, Expected, Dependent } Which;
  if (auto Call = pytext::callArgs(Code, "hasattr")) {
    auto Args = pytext::splitArgs(Call->first);
    std::optional<StringRef> A =
        Args.size() == 2 ? pytext::plainStr(Args[1]) : std::nullopt;
    if (!A || Call->second != " == False")
      return false;
    Attr = A->str();
    Item = strRepr(*A);
    Which = Absent;
  } else {
    StringRef S = Code;
    if (!S.consume_front("((") || !S.consume_back(" else True)"))
      return false;
    auto Get = pytext::callArgs(S, "getattr");
    if (!Get)
      return false;
    auto Args = pytext::splitArgs(Get->first);
    std::optional<StringRef> A =
        Args.size() == 3 ? pytext::plainStr(Args[1]) : std::nullopt;
    if (!A)
      return false;
    StringRef Tail = Get->second;
    size_t If = Tail.rfind(") if hasattr(");
    if (If == StringRef::npos)
      return false;
    auto Gate = pytext::callArgs(Tail.drop_front(If + 5), "hasattr");
    auto GateArgs = Gate ? pytext::splitArgs(Gate->first)
                         : llvm::SmallVector<StringRef, 8>();
    if (!Gate || !Gate->second.empty() || GateArgs.size() != 2 ||
        !pytext::plainStr(GateArgs[1]))
      return false;
    StringRef Cond = Tail.take_front(If);
    Attr = A->str();
    if (Args[2] == "set()" && Cond.consume_front(".issubset(") &&
        Cond.consume_back(")")) {
      Item = strRepr(*A) + ": " + Cond.str();
      Which = Expected;
    } else if (Args[2] == "None" && Cond.consume_front(" == ")) {
      Item = strRepr(*A) + ": (" + Cond.str() + ", " + GateArgs[1].str() + ")";
      Which = Dependent;
    } else {
      return false;
    }
  }
  // A part continues the guard of the line above it unless it names an
  // attribute that guard has already.
  bool Continue = Dim && Dim->Parent == N.Parent && Dim->LastNode + 1 == I &&
                  !Dim->Attrs.contains(Attr);
  if (!Continue) {
    flushDimension();
    Guard G = Base;
    G.Kind = GuardKind::DimensionMarking;
    Dim.emplace();
    Dim->Guard = P.Set.guards().size();
    Dim->Parent = N.Parent;
    addGuard(std::move(G), N.Loc);
  } else {
    // Keep every part's text, one per line.
    P.Set.guards()[Dim->Guard].Attrs.VerboseCode += "\n" + N.Body.str();
  }
  Dim->LastNode = I;
  Dim->Attrs.insert(Attr);
  (Which == Absent     ? Dim->Absent
   : Which == Expected ? Dim->Expected
                       : Dim->Dependent)
      .push_back(Item);
  return true;
}

void Importer::flushDimension() {
  if (!Dim)
    return;
  // The payload recorder.py stores: (expected_attrs, absent_attrs,
  // dependent_attrs), as its repr.
  std::string Repr = "({" + llvm::join(Dim->Expected, ", ") + "}, [" +
                     llvm::join(Dim->Absent, ", ") + "], {" +
                     llvm::join(Dim->Dependent, ", ") + "})";
  SMLoc Loc = P.Locs.Guards[Dim->Guard].Start;
  ObjectId Obj = object(ObjectKind::Constant, true, Repr, Loc);
  P.Set.guards()[Dim->Guard].Object = Obj;
  Dim.reset();
}

void Importer::resolveAliasing() {
  for (Aliasing &A : Aliasings) {
    for (StringRef Name : A.Names) {
      auto It = BySource.find(Name);
      if (It == BySource.end()) {
        warn(A.Loc, Twine(A.G.Kind == GuardKind::ObjectAliasing
                            ? "OBJECT_ALIASING"
                            : "NO_TENSOR_ALIASING") +
                        " names " + quoted(Name) +
                        ", which no guard manager of the tree reads; the "
                        "name is dropped");
        continue;
      }
      A.G.Operands.push_back(It->second);
    }
    if (A.G.Kind == GuardKind::ObjectAliasing && A.G.Operands.size() != 2) {
      // Without both sides the relation is not Guard IR's object_aliasing.
      warn(A.Loc, "OBJECT_ALIASING " + quoted(A.Code) +
                      " is kept as an opaque lambda guard");
      A.G.Kind = GuardKind::Lambda;
      A.G.Operands.resize(1, 0);
      A.G.Object = object(ObjectKind::Callable, true, A.Code, A.Loc);
    }
    if (A.G.Operands.empty())
      continue;
    addGuard(std::move(A.G), A.Loc);
  }
}

} // namespace

std::optional<std::vector<ParsedGuardSet>>
guardjit::importTorchLog(llvm::SourceMgr &SM, unsigned BufferId) {
  // 1. Syntax: the trees and their nodes.
  std::vector<GuardTree> Trees;
  if (!readGuardTrees(SM, BufferId, Trees))
    return std::nullopt;
  // 2-3. Meaning.
  std::vector<ParsedGuardSet> Out;
  for (const GuardTree &T : Trees)
    Out.push_back(Importer(SM, T).run());
  return Out;
}
