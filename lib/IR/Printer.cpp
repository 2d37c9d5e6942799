//===- Printer.cpp - Textual form (.gir) of Guard IR ----------------------===//
#include "guardjit/IR/Printer.h"

#include <cstdio>
#include <sstream>

namespace guardjit {

std::string quoteString(std::string_view S) {
  std::string Out = "\"";
  for (unsigned char C : S) {
    switch (C) {
    case '"':
      Out += "\\\"";
      break;
    case '\\':
      Out += "\\\\";
      break;
    case '\n':
      Out += "\\n";
      break;
    case '\t':
      Out += "\\t";
      break;
    default:
      if (C < 0x20 || C == 0x7f) {
        char Buf[8];
        std::snprintf(Buf, sizeof(Buf), "\\x%02x", C);
        Out += Buf;
      } else {
        Out += static_cast<char>(C);
      }
    }
  }
  Out += '"';
  return Out;
}

static void printDims(std::ostream &OS,
                      const std::vector<std::optional<int64_t>> &Dims) {
  OS << '[';
  for (size_t I = 0; I < Dims.size(); ++I) {
    if (I)
      OS << ", ";
    if (Dims[I])
      OS << *Dims[I];
    else
      OS << '?';
  }
  OS << ']';
}

static void printTensorSpec(std::ostream &OS, uint32_t Id, const TensorSpec &T) {
  char Keys[32];
  std::snprintf(Keys, sizeof(Keys), "0x%llx",
                static_cast<unsigned long long>(T.DispatchKeys));
  OS << "  tensor " << Id << " = pytype=#" << T.PyType << " keys=" << Keys
     << " dtype=" << int(T.DType) << " device=" << int(T.DeviceIndex)
     << " requires_grad=" << (T.RequiresGrad ? "true" : "false") << " sizes=";
  printDims(OS, T.Sizes);
  OS << " strides=";
  printDims(OS, T.Strides);
  OS << '\n';
}

static void printValue(std::ostream &OS, ValueId Id, const Value &V) {
  OS << "  %" << Id << " = " << spelling(V.Kind);
  if (V.Kind != AccessorKind::Root)
    OS << " %" << V.Parent;
  if (!V.Name.empty())
    OS << " name=" << quoteString(V.Name);
  // -1 is "no index"; any other value (even a negative one) is printed so
  // that parse(print(S)) == S.
  if (V.Index != -1)
    OS << " index=" << V.Index;
  if (V.Key != InvalidId)
    OS << " key=#" << V.Key;
  if (V.Origin != InvalidId)
    OS << " origin=" << V.Origin;
  OS << " source=" << quoteString(V.Source) << '\n';
}

static void printGuard(std::ostream &OS, const Guard &G) {
  OS << "  guard " << spelling(G.Kind);
  for (size_t I = 0; I < G.Operands.size(); ++I)
    OS << (I ? ", %" : " %") << G.Operands[I];
  if (G.Object != InvalidId)
    OS << " object=#" << G.Object;
  if (G.Aux != InvalidId)
    OS << " aux=#" << G.Aux;
  if (G.Int != 0)
    OS << " int=" << G.Int;
  if (!G.Ints.empty()) {
    OS << " ints=[";
    for (size_t I = 0; I < G.Ints.size(); ++I)
      OS << (I ? ", " : "") << G.Ints[I];
    OS << ']';
  }
  if (!G.Str.empty())
    OS << " str=" << quoteString(G.Str);
  if (G.Tensor != InvalidId)
    OS << " tensor=" << G.Tensor;
  if (G.Origin != InvalidId)
    OS << " origin=" << G.Origin;
  if (!G.Expr.empty())
    OS << " expr=" << printShapeExpr(G.Expr);
  const GuardAttrs &A = G.Attrs;
  OS << " source=" << quoteString(A.Source);
  if (!A.Loc.empty() || A.Loc.Line != 0)
    OS << " loc=" << quoteString(A.Loc.File) << ':' << A.Loc.Line;
  // Last: Dynamo's verbose code parts are the longest attribute.
  if (!A.VerboseCode.empty())
    OS << " verbose=" << quoteString(A.VerboseCode);
  OS << '\n';
}

// origin N = "GUARD_TYPE" name="..." [derived=["..", ..]] [has_value]
//            [global] [parameter] [nn_module] [builtin_nn_module]
static void printOrigin(std::ostream &OS, uint32_t Id, const GuardOrigin &O) {
  OS << "  origin " << Id << " = " << quoteString(O.GuardType)
     << " name=" << quoteString(O.Name);
  if (!O.DerivedGuardTypes.empty()) {
    OS << " derived=[";
    for (size_t I = 0; I < O.DerivedGuardTypes.size(); ++I)
      OS << (I ? ", " : "") << quoteString(O.DerivedGuardTypes[I]);
    OS << ']';
  }
  if (O.HasValue)
    OS << " has_value";
  if (O.IsGlobal)
    OS << " global";
  if (O.ValueIsParameter)
    OS << " parameter";
  if (O.UnspecializedNNModule)
    OS << " nn_module";
  if (O.UnspecializedBuiltinNNModule)
    OS << " builtin_nn_module";
  OS << '\n';
}

static void printGuardSet(std::ostream &OS, const GuardSet &Set) {
  OS << "guard_set " << quoteString(Set.name()) << " {\n";
  const auto &Objects = Set.objects();
  for (size_t I = 0; I < Objects.size(); ++I)
    OS << "  object #" << I << " = " << spelling(Objects[I].Kind)
       << (Objects[I].Strong ? " strong " : " ")
       << quoteString(Objects[I].Repr)
       << (Objects[I].Name.empty() ? "" : " name=" + quoteString(Objects[I].Name))
       << '\n';
  const auto &Specs = Set.tensorSpecs();
  for (size_t I = 0; I < Specs.size(); ++I)
    printTensorSpec(OS, static_cast<uint32_t>(I), Specs[I]);
  const auto &Origins = Set.origins();
  for (size_t I = 0; I < Origins.size(); ++I)
    printOrigin(OS, static_cast<uint32_t>(I), Origins[I]);
  const auto &Values = Set.values();
  for (size_t I = 0; I < Values.size(); ++I)
    printValue(OS, static_cast<ValueId>(I), Values[I]);
  for (const Guard &G : Set.guards())
    printGuard(OS, G);
  OS << "}\n";
}

std::string printGirHeader(const GirHeader &H) {
  return "gir torch=" + quoteString(H.Torch) +
         " guardjit=" + quoteString(H.Guardjit) + "\n";
}

std::string printGuardSet(const GuardSet &Set) {
  std::ostringstream OS;
  printGuardSet(OS, Set);
  return OS.str();
}

std::string printGuardSets(const std::vector<GuardSet> &Sets) {
  std::ostringstream OS;
  for (size_t I = 0; I < Sets.size(); ++I) {
    if (I)
      OS << '\n';
    printGuardSet(OS, Sets[I]);
  }
  return OS.str();
}

std::string printCodeObject(std::string_view Name,
                            const std::vector<const GuardSet *> &Units) {
  std::ostringstream OS;
  OS << "code_object " << quoteString(Name) << " {\n";
  for (size_t I = 0; I < Units.size(); ++I) {
    if (I)
      OS << '\n';
    if (Units[I])
      printGuardSet(OS, *Units[I]);
    else
      OS << "opaque\n";
  }
  OS << "}\n";
  return OS.str();
}

} // namespace guardjit
