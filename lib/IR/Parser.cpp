//===- Parser.cpp - Reads the .gir text format ----------------------------===//
//
// A recursive-descent parser in the style of LLVM's LLParser: each parse*
// function returns true on failure after reporting it. Only the first error
// is reported; everything after it is a consequence.
//
//===----------------------------------------------------------------------===//
#include "guardjit/IR/Parser.h"

#include "Lexer.h"
#include "guardjit/IR/Verifier.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <limits>

using namespace guardjit;
using llvm::SMLoc;
using llvm::StringRef;
using llvm::Twine;

namespace {

class Parser {
public:
  Parser(llvm::SourceMgr &SM, unsigned BufferId)
      : SM(SM), Lex(SM.getMemoryBuffer(BufferId)->getBuffer()) {
    consume();
  }

  bool parseFile(std::vector<ParsedGuardSet> &Out,
                 std::vector<ParsedCodeObject> *CodeObjects,
                 std::optional<ParsedGirHeader> *Header);

private:
  void consume() {
    Tok = Lex.lex();
    if (Tok.is(Token::Error))
      error(Lex.errorLoc(), Lex.errorMessage());
  }
  /// Reports `Msg` at `Loc` unless an error was reported already; always
  /// returns true so that callers can `return error(...)`.
  bool error(SMLoc Loc, const Twine &Msg) {
    if (!HadError)
      SM.PrintMessage(Loc, llvm::SourceMgr::DK_Error, Msg);
    HadError = true;
    return true;
  }
  bool error(const Twine &Msg) { return error(Tok.loc(), Msg); }
  bool expect(Token::Kind K, const Twine &Msg) {
    if (!Tok.is(K))
      return error(Msg);
    consume();
    return false;
  }
  /// Consumes `=` after attribute `Name`.
  bool expectEqual(StringRef Name) {
    return expect(Token::Equal, "expected '=' after '" + Name + "'");
  }

  // Scalars. Each consumes its token on success.
  bool parseString(std::string &Out, StringRef What);
  bool parseUInt64(uint64_t &Out, StringRef What);
  bool parseInt64(int64_t &Out, StringRef What);
  bool parseInt8(int8_t &Out, StringRef What);
  bool parseUInt32(uint32_t &Out, StringRef What);
  bool parseRef(Token::Kind K, uint32_t &Out, SMLoc *Loc, StringRef What);
  bool parseBool(bool &Out, StringRef What);
  bool parseDims(std::vector<std::optional<int64_t>> &Out, StringRef What);
  bool parseInts(std::vector<int64_t> &Out, StringRef What);
  /// Reads an attribute name; rejects repeats within one entity.
  bool parseAttrName(StringRef &Name, SMLoc &Loc, llvm::StringSet<> &Seen);

  bool parseSet(std::vector<ParsedGuardSet> &Out);
  bool parseHeader(ParsedGirHeader &H);
  bool parseCodeObject(std::vector<ParsedGuardSet> &Out,
                       std::vector<ParsedCodeObject> &CodeObjects);
  bool parseObject(ParsedGuardSet &P);
  bool parseTensor(ParsedGuardSet &P);
  bool parseOrigin(ParsedGuardSet &P);
  bool parseStringList(std::vector<std::string> &Out, StringRef What);
  bool parseValue(ParsedGuardSet &P, bool &RootSeen);
  bool parseGuard(ParsedGuardSet &P);

public:
  /// A shape expression node and its arguments, appended in post-order to
  /// `E` (the node's location to `Locs`).
  bool parseShapeExpr(ShapeExpr &E, std::vector<SMLoc> &Locs);
  /// Fails unless the input ends here.
  bool expectEnd() {
    if (Tok.is(Token::Eof) || Tok.is(Token::Eol))
      return false;
    return error("unexpected text after the shape expression");
  }

private:
  llvm::SourceMgr &SM;
  Lexer Lex;
  Token Tok;
  bool HadError = false;
  unsigned ExprDepth = 0;
};

} // namespace

bool Parser::parseString(std::string &Out, StringRef What) {
  if (!Tok.is(Token::String))
    return error("expected string for " + What);
  Out = Lex.stringValue();
  consume();
  return false;
}

/// Parses a decimal or 0x-prefixed integer token; leaves `Neg` set for a
/// leading '-'. Fails (without reporting) when the magnitude overflows.
static bool integerMagnitude(StringRef Text, uint64_t &Mag, bool &Neg) {
  Neg = Text.consume_front("-");
  unsigned Radix = 10;
  if (Text.consume_front("0x") || Text.consume_front("0X"))
    Radix = 16;
  return Text.getAsInteger(Radix, Mag);
}

bool Parser::parseUInt64(uint64_t &Out, StringRef What) {
  if (!Tok.is(Token::Integer))
    return error("expected integer for " + What);
  bool Neg;
  if (integerMagnitude(Tok.Text, Out, Neg) || (Neg && Out != 0))
    return error("integer out of range for " + What);
  consume();
  return false;
}

bool Parser::parseInt64(int64_t &Out, StringRef What) {
  if (!Tok.is(Token::Integer))
    return error("expected integer for " + What);
  uint64_t Mag;
  bool Neg;
  constexpr uint64_t Max = std::numeric_limits<int64_t>::max();
  if (integerMagnitude(Tok.Text, Mag, Neg) || Mag > Max + uint64_t(Neg))
    return error("integer out of range for " + What);
  // Two's complement negation in unsigned arithmetic handles INT64_MIN.
  Out = static_cast<int64_t>(Neg ? 0 - Mag : Mag);
  consume();
  return false;
}

bool Parser::parseInt8(int8_t &Out, StringRef What) {
  SMLoc Loc = Tok.loc();
  int64_t V;
  if (parseInt64(V, What))
    return true;
  if (V < std::numeric_limits<int8_t>::min() ||
      V > std::numeric_limits<int8_t>::max())
    return error(Loc, "integer out of range for " + What);
  Out = static_cast<int8_t>(V);
  return false;
}

bool Parser::parseUInt32(uint32_t &Out, StringRef What) {
  SMLoc Loc = Tok.loc();
  uint64_t V;
  if (parseUInt64(V, What))
    return true;
  if (V > std::numeric_limits<uint32_t>::max())
    return error(Loc, "integer out of range for " + What);
  Out = static_cast<uint32_t>(V);
  return false;
}

bool Parser::parseRef(Token::Kind K, uint32_t &Out, SMLoc *Loc,
                      StringRef What) {
  if (!Tok.is(K))
    return error(Twine("expected ") + (K == Token::ValueRef ? "%" : "#") +
                 "N for " + What);
  // The token's text is the digits; the location is the sigil before them.
  SMLoc At = SMLoc::getFromPointer(Tok.Text.data() - 1);
  uint64_t V;
  if (Tok.Text.getAsInteger(10, V) || V > std::numeric_limits<uint32_t>::max())
    return error(At, "reference out of range for " + What);
  Out = static_cast<uint32_t>(V);
  if (Loc)
    *Loc = At;
  consume();
  return false;
}

bool Parser::parseBool(bool &Out, StringRef What) {
  if (Tok.isKeyword("true"))
    Out = true;
  else if (Tok.isKeyword("false"))
    Out = false;
  else
    return error("expected 'true' or 'false' for " + What);
  consume();
  return false;
}

bool Parser::parseDims(std::vector<std::optional<int64_t>> &Out,
                       StringRef What) {
  Out.clear();
  if (expect(Token::LSquare, "expected '[' for " + What))
    return true;
  if (Tok.is(Token::RSquare)) {
    consume();
    return false;
  }
  while (true) {
    if (Tok.is(Token::Question)) {
      Out.push_back(std::nullopt);
      consume();
    } else {
      int64_t V;
      if (parseInt64(V, What))
        return true;
      Out.push_back(V);
    }
    if (Tok.is(Token::RSquare)) {
      consume();
      return false;
    }
    if (expect(Token::Comma, "expected ',' or ']' in " + What))
      return true;
  }
}

bool Parser::parseInts(std::vector<int64_t> &Out, StringRef What) {
  Out.clear();
  if (expect(Token::LSquare, "expected '[' for " + What))
    return true;
  if (Tok.is(Token::RSquare)) {
    consume();
    return false;
  }
  while (true) {
    int64_t V;
    if (parseInt64(V, What))
      return true;
    Out.push_back(V);
    if (Tok.is(Token::RSquare)) {
      consume();
      return false;
    }
    if (expect(Token::Comma, "expected ',' or ']' in " + What))
      return true;
  }
}

bool Parser::parseAttrName(StringRef &Name, SMLoc &Loc,
                           llvm::StringSet<> &Seen) {
  if (!Tok.is(Token::Identifier))
    return error("expected attribute name or end of line");
  Name = Tok.Text;
  Loc = Tok.loc();
  if (!Seen.insert(Name).second)
    return error("duplicate attribute '" + Name + "'");
  consume();
  return false;
}

static bool atEntityEnd(const Token &T) {
  return T.is(Token::Eol) || T.is(Token::Eof);
}

// gir torch="..." guardjit="..."
bool Parser::parseHeader(ParsedGirHeader &H) {
  H.Loc = Tok.loc();
  consume();
  llvm::StringSet<> Seen;
  bool HasTorch = false, HasGuardjit = false;
  while (!atEntityEnd(Tok)) {
    StringRef Name;
    SMLoc Loc;
    if (parseAttrName(Name, Loc, Seen))
      return true;
    if (Name == "torch") {
      HasTorch = true;
      if (expectEqual(Name) || parseString(H.Versions.Torch, "the torch version"))
        return true;
    } else if (Name == "guardjit") {
      HasGuardjit = true;
      if (expectEqual(Name) ||
          parseString(H.Versions.Guardjit, "the guardjit version"))
        return true;
    } else {
      return error(Loc, "unknown header attribute '" + Name + "'");
    }
  }
  if (!HasTorch || !HasGuardjit)
    return error(H.Loc, "the gir header needs torch=\"..\" and guardjit=\"..\"");
  return false;
}

bool Parser::parseFile(std::vector<ParsedGuardSet> &Out,
                       std::vector<ParsedCodeObject> *CodeObjects,
                       std::optional<ParsedGirHeader> *Header) {
  bool First = true;
  while (true) {
    if (Tok.is(Token::Eol))
      consume();
    if (Tok.is(Token::Eof))
      return HadError;
    if (Tok.isKeyword("gir")) {
      // The version header: once, before any set (docs/gir-format.md).
      if (!First)
        return error("the gir header must come before every guard set");
      First = false;
      ParsedGirHeader H;
      if (parseHeader(H))
        return true;
      if (Header)
        *Header = std::move(H);
      continue;
    }
    First = false;
    if (Tok.isKeyword("code_object")) {
      if (!CodeObjects)
        return error("code_object blocks are not accepted here (a lone "
                     "guard set was expected)");
      if (parseCodeObject(Out, *CodeObjects))
        return true;
      continue;
    }
    if (!Tok.isKeyword("guard_set"))
      return error(CodeObjects ? "expected 'guard_set' or 'code_object'"
                               : "expected 'guard_set'");
    if (parseSet(Out))
      return true;
  }
}

bool Parser::parseCodeObject(std::vector<ParsedGuardSet> &Out,
                             std::vector<ParsedCodeObject> &CodeObjects) {
  ParsedCodeObject C;
  C.Loc = Tok.loc();
  C.SetsBefore = Out.size();
  consume();
  if (parseString(C.Name, "the code object name") ||
      expect(Token::LBrace, "expected '{' after the code object name") ||
      expect(Token::Eol, "expected end of line after '{'"))
    return true;
  uint32_t Index = static_cast<uint32_t>(CodeObjects.size());
  while (true) {
    if (Tok.is(Token::Eol))
      consume();
    if (Tok.is(Token::Eof))
      return error("expected '}' at end of code object");
    if (Tok.is(Token::RBrace))
      break;
    if (Tok.isKeyword("guard_set")) {
      if (parseSet(Out))
        return true;
      Out.back().CodeObject = Index;
      C.Units.push_back(static_cast<uint32_t>(Out.size() - 1));
      continue;
    }
    if (Tok.isKeyword("opaque")) {
      consume();
      if (!atEntityEnd(Tok))
        return error("expected end of line after 'opaque'");
      C.Units.push_back(InvalidId);
      continue;
    }
    return error("expected 'guard_set', 'opaque' or '}' in a code object");
  }
  consume();
  if (!atEntityEnd(Tok))
    return error("expected end of line after '}'");
  CodeObjects.push_back(std::move(C));
  return false;
}

bool Parser::parseSet(std::vector<ParsedGuardSet> &Out) {
  SMLoc SetLoc = Tok.loc();
  consume();
  std::string Name;
  if (parseString(Name, "the guard set name"))
    return true;
  ParsedGuardSet P{GuardSet(std::move(Name)), {}};
  P.Locs.Set = SetLoc;
  // The root exists before its `%0 = root` line (which may be omitted).
  EntityLoc RootLoc;
  RootLoc.Start = SetLoc;
  P.Locs.Values.push_back(std::move(RootLoc));
  if (expect(Token::LBrace, "expected '{' after the guard set name") ||
      expect(Token::Eol, "expected end of line after '{'"))
    return true;
  bool RootSeen = false;
  while (!Tok.is(Token::RBrace)) {
    if (Tok.is(Token::Eof))
      return error("expected '}' at end of guard set");
    bool Failed;
    StringRef What;
    if (Tok.isKeyword("object")) {
      Failed = parseObject(P);
      What = "object";
    } else if (Tok.isKeyword("tensor")) {
      Failed = parseTensor(P);
      What = "tensor spec";
    } else if (Tok.isKeyword("origin")) {
      Failed = parseOrigin(P);
      What = "origin";
    } else if (Tok.is(Token::ValueRef)) {
      Failed = parseValue(P, RootSeen);
      What = "value";
    } else if (Tok.isKeyword("guard")) {
      Failed = parseGuard(P);
      What = "guard";
    } else {
      return error(
          "expected 'object', 'tensor', 'origin', '%N', 'guard' or '}'");
    }
    if (Failed)
      return true;
    if (Tok.is(Token::Eof))
      return error("expected '}' at end of guard set");
    if (expect(Token::Eol, "expected end of line after " + What))
      return true;
  }
  consume();
  if (!atEntityEnd(Tok))
    return error("expected end of line after '}'");
  Out.push_back(std::move(P));
  return false;
}

// object #N = kind [strong] "repr"
bool Parser::parseObject(ParsedGuardSet &P) {
  EntityLoc Loc;
  Loc.Start = Tok.loc();
  consume();
  uint32_t Id;
  SMLoc IdLoc;
  if (parseRef(Token::ObjectRef, Id, &IdLoc, "the object id"))
    return true;
  size_t Expected = P.Set.objects().size();
  if (Id != Expected)
    return error(IdLoc, "object defined out of order: expected #" +
                            Twine(Expected));
  if (expect(Token::Equal, "expected '=' after the object id"))
    return true;
  if (!Tok.is(Token::Identifier))
    return error("expected object kind");
  std::optional<ObjectKind> Kind = parseObjectKind(Tok.Text.str());
  if (!Kind)
    return error("unknown object kind '" + Tok.Text + "'");
  consume();
  ObjectEntry E;
  E.Kind = *Kind;
  if (Tok.isKeyword("strong")) {
    E.Strong = true;
    consume();
  }
  if (parseString(E.Repr, "the object's repr"))
    return true;
  if (Tok.isKeyword("name")) {
    consume();
    if (expectEqual("name") || parseString(E.Name, "the object's name"))
      return true;
  }
  P.Set.addObject(std::move(E));
  P.Locs.Objects.push_back(std::move(Loc));
  return false;
}

// tensor N = pytype=#K keys=0x.. dtype=D device=D requires_grad=B sizes=[..]
//            strides=[..]
bool Parser::parseTensor(ParsedGuardSet &P) {
  EntityLoc Loc;
  Loc.Start = Tok.loc();
  consume();
  SMLoc IdLoc = Tok.loc();
  uint32_t Id;
  if (parseUInt32(Id, "the tensor spec id"))
    return true;
  size_t Expected = P.Set.tensorSpecs().size();
  if (Id != Expected)
    return error(IdLoc, "tensor spec defined out of order: expected " +
                            Twine(Expected));
  if (expect(Token::Equal, "expected '=' after the tensor spec id"))
    return true;
  TensorSpec T;
  llvm::StringSet<> Seen;
  while (!atEntityEnd(Tok)) {
    StringRef Name;
    SMLoc NameLoc;
    if (parseAttrName(Name, NameLoc, Seen) || expectEqual(Name))
      return true;
    bool Failed;
    if (Name == "pytype")
      Failed = parseRef(Token::ObjectRef, T.PyType, &Loc.Object, Name);
    else if (Name == "keys")
      Failed = parseUInt64(T.DispatchKeys, Name);
    else if (Name == "dtype")
      Failed = parseInt8(T.DType, Name);
    else if (Name == "device")
      Failed = parseInt8(T.DeviceIndex, Name);
    else if (Name == "requires_grad")
      Failed = parseBool(T.RequiresGrad, Name);
    else if (Name == "sizes")
      Failed = parseDims(T.Sizes, Name);
    else if (Name == "strides")
      Failed = parseDims(T.Strides, Name);
    else
      return error(NameLoc, "unknown tensor spec attribute '" + Name + "'");
    if (Failed)
      return true;
  }
  P.Set.addTensorSpec(std::move(T));
  P.Locs.TensorSpecs.push_back(std::move(Loc));
  return false;
}

bool Parser::parseStringList(std::vector<std::string> &Out, StringRef What) {
  Out.clear();
  if (expect(Token::LSquare, "expected '[' for " + What))
    return true;
  if (Tok.is(Token::RSquare)) {
    consume();
    return false;
  }
  while (true) {
    std::string S;
    if (parseString(S, What))
      return true;
    Out.push_back(std::move(S));
    if (Tok.is(Token::RSquare)) {
      consume();
      return false;
    }
    if (expect(Token::Comma, "expected ',' or ']' in " + What))
      return true;
  }
}

// origin N = "GUARD_TYPE" name="..." [derived=["..", ..]] [has_value]
//            [global] [parameter] [nn_module] [builtin_nn_module]
bool Parser::parseOrigin(ParsedGuardSet &P) {
  EntityLoc Loc;
  Loc.Start = Tok.loc();
  consume();
  SMLoc IdLoc = Tok.loc();
  uint32_t Id;
  if (parseUInt32(Id, "the origin id"))
    return true;
  size_t Expected = P.Set.origins().size();
  if (Id != Expected)
    return error(IdLoc, "origin defined out of order: expected " +
                            Twine(Expected));
  if (expect(Token::Equal, "expected '=' after the origin id"))
    return true;
  GuardOrigin O;
  if (parseString(O.GuardType, "the origin's guard type"))
    return true;
  llvm::StringSet<> Seen;
  bool NameSeen = false;
  while (!atEntityEnd(Tok)) {
    StringRef Name;
    SMLoc NameLoc;
    if (parseAttrName(Name, NameLoc, Seen))
      return true;
    bool *Flag = llvm::StringSwitch<bool *>(Name)
                     .Case("has_value", &O.HasValue)
                     .Case("global", &O.IsGlobal)
                     .Case("parameter", &O.ValueIsParameter)
                     .Case("nn_module", &O.UnspecializedNNModule)
                     .Case("builtin_nn_module", &O.UnspecializedBuiltinNNModule)
                     .Default(nullptr);
    if (Flag) {
      *Flag = true;
      continue;
    }
    if (expectEqual(Name))
      return true;
    bool Failed;
    if (Name == "name") {
      Failed = parseString(O.Name, Name);
      NameSeen = true;
    } else if (Name == "derived")
      Failed = parseStringList(O.DerivedGuardTypes, Name);
    else
      return error(NameLoc, "unknown origin attribute '" + Name + "'");
    if (Failed)
      return true;
  }
  if (!NameSeen)
    return error(Loc.Start, "origin " + Twine(Id) + " has no name=\"...\"");
  P.Set.addOrigin(std::move(O));
  P.Locs.Origins.push_back(std::move(Loc));
  return false;
}

// %N = accessor [%parent] [name="..."] [index=I] [key=#K] [source="..."]
bool Parser::parseValue(ParsedGuardSet &P, bool &RootSeen) {
  EntityLoc Loc;
  SMLoc IdLoc = SMLoc::getFromPointer(Tok.Text.data() - 1);
  Loc.Start = IdLoc;
  uint32_t Id;
  if (parseRef(Token::ValueRef, Id, nullptr, "the value id"))
    return true;
  std::vector<Value> &Values = P.Set.values();
  // %0 is the root GuardSet made already; its line only sets its source.
  bool IsRootLine = Id == 0 && !RootSeen && Values.size() == 1;
  size_t Expected = Values.size();
  if (!IsRootLine && Id != Expected)
    return error(IdLoc, "value defined out of order: expected %" +
                            Twine(Expected));
  if (expect(Token::Equal, "expected '=' after the value id"))
    return true;
  if (!Tok.is(Token::Identifier))
    return error("expected accessor kind");
  std::optional<AccessorKind> Kind = parseAccessorKind(Tok.Text.str());
  if (!Kind)
    return error("unknown accessor '" + Tok.Text + "'");
  if (IsRootLine && *Kind != AccessorKind::Root)
    return error("%0 must be the root value");
  consume();
  Value V;
  V.Kind = *Kind;
  if (*Kind == AccessorKind::Root) {
    if (Tok.is(Token::ValueRef))
      return error("the root value has no parent");
  } else {
    SMLoc ParentLoc;
    if (parseRef(Token::ValueRef, V.Parent, &ParentLoc, "the parent value"))
      return true;
    Loc.Operands.push_back(ParentLoc);
  }
  llvm::StringSet<> Seen;
  while (!atEntityEnd(Tok)) {
    StringRef Name;
    SMLoc NameLoc;
    if (parseAttrName(Name, NameLoc, Seen) || expectEqual(Name))
      return true;
    bool Failed;
    if (Name == "name")
      Failed = parseString(V.Name, Name);
    else if (Name == "index")
      Failed = parseInt64(V.Index, Name);
    else if (Name == "key")
      Failed = parseRef(Token::ObjectRef, V.Key, &Loc.Object, Name);
    else if (Name == "origin") {
      Loc.Origin = Tok.loc();
      Failed = parseUInt32(V.Origin, Name);
    } else if (Name == "source")
      Failed = parseString(V.Source, Name);
    else
      return error(NameLoc, "unknown value attribute '" + Name + "'");
    if (Failed)
      return true;
  }
  if (IsRootLine) {
    RootSeen = true;
    Values[0] = std::move(V);
    P.Locs.Values[0] = std::move(Loc);
    return false;
  }
  RootSeen = true; // a later `%0 = root` would be out of order
  Values.push_back(std::move(V));
  P.Locs.Values.push_back(std::move(Loc));
  return false;
}

// guard kind [%a, %b ...] [object=#N] [aux=#N] [int=I] [str="..."]
//   [ints=[a, b, ..]] [tensor=N] [origin=N]
//   [source="..."] [loc="file":line] [verbose="..."]
bool Parser::parseGuard(ParsedGuardSet &P) {
  EntityLoc Loc;
  Loc.Start = Tok.loc();
  consume();
  if (!Tok.is(Token::Identifier))
    return error("expected guard kind");
  std::optional<GuardKind> Kind = parseGuardKind(Tok.Text.str());
  if (!Kind)
    return error("unknown guard kind '" + Tok.Text + "'");
  consume();
  Guard G;
  G.Kind = *Kind;
  if (Tok.is(Token::ValueRef)) {
    while (true) {
      ValueId Op;
      SMLoc OpLoc;
      if (parseRef(Token::ValueRef, Op, &OpLoc, "the operand"))
        return true;
      G.Operands.push_back(Op);
      Loc.Operands.push_back(OpLoc);
      if (!Tok.is(Token::Comma))
        break;
      consume();
    }
  }
  llvm::StringSet<> Seen;
  GuardAttrs &A = G.Attrs;
  while (!atEntityEnd(Tok)) {
    StringRef Name;
    SMLoc NameLoc;
    if (parseAttrName(Name, NameLoc, Seen) || expectEqual(Name))
      return true;
    bool Failed;
    if (Name == "object")
      Failed = parseRef(Token::ObjectRef, G.Object, &Loc.Object, Name);
    else if (Name == "aux")
      Failed = parseRef(Token::ObjectRef, G.Aux, &Loc.Aux, Name);
    else if (Name == "int")
      Failed = parseInt64(G.Int, Name);
    else if (Name == "ints")
      Failed = parseInts(G.Ints, Name);
    else if (Name == "str")
      Failed = parseString(G.Str, Name);
    else if (Name == "tensor") {
      Loc.Tensor = Tok.loc();
      Failed = parseUInt32(G.Tensor, Name);
    } else if (Name == "origin") {
      Loc.Origin = Tok.loc();
      Failed = parseUInt32(G.Origin, Name);
    } else if (Name == "source")
      Failed = parseString(A.Source, Name);
    else if (Name == "loc")
      Failed = parseString(A.Loc.File, "the file of loc") ||
               expect(Token::Colon, "expected ':' after the file of loc") ||
               parseUInt32(A.Loc.Line, "the line of loc");
    else if (Name == "verbose")
      Failed = parseString(A.VerboseCode, Name);
    else if (Name == "expr")
      Failed = parseShapeExpr(G.Expr, Loc.ExprNodes);
    else
      return error(NameLoc, "unknown guard attribute '" + Name + "'");
    if (Failed)
      return true;
  }
  P.Set.guards().push_back(std::move(G));
  P.Locs.Guards.push_back(std::move(Loc));
  return false;
}

bool Parser::parseShapeExpr(ShapeExpr &E, std::vector<SMLoc> &Locs) {
  // Deep nesting is the only way to make this recursion overflow the stack;
  // real shape guards nest a few levels.
  if (++ExprDepth > 256) {
    --ExprDepth;
    return error("shape expression nested too deeply");
  }
  struct DepthGuard {
    unsigned &D;
    ~DepthGuard() { --D; }
  } Depth{ExprDepth};
  SMLoc Loc = Tok.loc();
  ShapeNode N;
  if (Tok.is(Token::Integer)) {
    N.Op = ShapeOp::ConstInt;
    if (parseInt64(N.Int, "an integer constant"))
      return true;
  } else if (Tok.is(Token::Float) ||
             (Tok.is(Token::Identifier) &&
              (Tok.Text == "inf" || Tok.Text == "-inf" || Tok.Text == "nan"))) {
    N.Op = ShapeOp::ConstFloat;
    if (Tok.Text == "inf" || Tok.Text == "-inf")
      N.Float = Tok.Text == "inf" ? std::numeric_limits<double>::infinity()
                                  : -std::numeric_limits<double>::infinity();
    else if (Tok.Text == "nan")
      N.Float = std::numeric_limits<double>::quiet_NaN();
    else if (Tok.Text.getAsDouble(N.Float, /*AllowInexact=*/true) ||
             !std::isfinite(N.Float))
      return error("float constant out of range");
    consume();
  } else if (Tok.is(Token::LParen)) {
    consume();
    if (!Tok.is(Token::Identifier))
      return error("expected a shape operator after '('");
    std::optional<ShapeOp> Op = parseShapeOp(Tok.Text.str());
    std::string OpName;
    if (!Op || *Op == ShapeOp::ConstInt || *Op == ShapeOp::ConstFloat)
      return error("unknown shape operator '" + Tok.Text + "'");
    N.Op = *Op;
    OpName = std::string(spelling(N.Op));
    consume();
    if (N.Op == ShapeOp::ReadInt || N.Op == ShapeOp::ReadFloat) {
      if (!Tok.is(Token::OperandRef))
        return error("expected an operand '$N' after '" + OpName +
                     "'");
      uint32_t Index;
      if (Tok.Text.getAsInteger(10, Index))
        return error("operand index out of range");
      N.Int = Index;
      consume();
    } else {
      while (!Tok.is(Token::RParen)) {
        if (atEntityEnd(Tok))
          return error("expected ')' to close '" + OpName + "'");
        if (parseShapeExpr(E, Locs))
          return true;
        N.Args.push_back(static_cast<uint32_t>(E.size() - 1));
      }
    }
    if (expect(Token::RParen, "expected ')' to close '" + OpName + "'"))
      return true;
  } else {
    return error("expected a shape expression: an integer, a float or '('");
  }
  E.push_back(std::move(N));
  Locs.push_back(Loc);
  return false;
}

std::optional<std::vector<ParsedGuardSet>>
guardjit::parseGir(llvm::SourceMgr &SM, unsigned BufferId,
                   std::vector<ParsedCodeObject> *CodeObjects,
                   std::optional<ParsedGirHeader> *Header) {
  std::vector<ParsedGuardSet> Out;
  Parser P(SM, BufferId);
  if (Header)
    Header->reset();
  if (P.parseFile(Out, CodeObjects, Header))
    return std::nullopt;
  return Out;
}

llvm::Expected<std::vector<GuardSet>>
guardjit::parseGirString(StringRef Text, StringRef BufferName,
                         std::optional<GirHeader> *Header) {
  llvm::SourceMgr SM;
  std::string Diags;
  llvm::raw_string_ostream OS(Diags);
  SM.setDiagHandler(
      [](const llvm::SMDiagnostic &D, void *Ctx) {
        D.print(/*ProgName=*/nullptr, *static_cast<llvm::raw_ostream *>(Ctx),
                /*ShowColors=*/false);
      },
      &OS);
  unsigned Id = SM.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(Text, BufferName), SMLoc());
  std::optional<ParsedGirHeader> ParsedHeader;
  std::optional<std::vector<ParsedGuardSet>> Parsed =
      parseGir(SM, Id, nullptr, &ParsedHeader);
  if (Header) {
    Header->reset();
    if (ParsedHeader)
      *Header = ParsedHeader->Versions;
  }
  bool Ok = Parsed.has_value();
  if (Ok)
    for (const ParsedGuardSet &P : *Parsed)
      Ok &= verifyGuardSet(P.Set, P.Locs, SM);
  if (!Ok)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   StringRef(Diags).rtrim("\n"));
  std::vector<GuardSet> Sets;
  for (ParsedGuardSet &P : *Parsed)
    Sets.push_back(std::move(P.Set));
  return Sets;
}

llvm::Expected<ShapeExpr> guardjit::parseShapeExprString(StringRef Text) {
  llvm::SourceMgr SM;
  std::string Diags;
  llvm::raw_string_ostream OS(Diags);
  SM.setDiagHandler(
      [](const llvm::SMDiagnostic &D, void *Ctx) {
        D.print(/*ProgName=*/nullptr, *static_cast<llvm::raw_ostream *>(Ctx),
                /*ShowColors=*/false);
      },
      &OS);
  unsigned Id = SM.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(Text, "<expr>"), SMLoc());
  Parser P(SM, Id);
  ShapeExpr E;
  std::vector<SMLoc> Locs;
  if (P.parseShapeExpr(E, Locs) || P.expectEnd())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   StringRef(Diags).rtrim("\n"));
  return E;
}
