//===- PrinterTest.cpp - .gir printer tests -------------------------------===//
#include "guardjit/IR/Printer.h"

#include <gtest/gtest.h>

using namespace guardjit;

namespace {

GuardSet makeSet() {
  GuardSet S("forward_0");
  ObjectId Ty = S.addObject({ObjectKind::Type, "<class 'float'>", false, 0});
  ObjectId Name = S.addObject({ObjectKind::Key, "'x'", true, 0});
  Value X;
  X.Kind = AccessorKind::FrameLocal;
  X.Parent = GuardSet::root();
  X.Name = "x";
  X.Index = 1;
  X.Key = Name;
  X.Source = "L['x']";
  ValueId XId = S.addValue(X);
  Guard G;
  G.Kind = GuardKind::TypeMatch;
  G.Operands = {XId};
  G.Object = Ty;
  G.Attrs.Source = "L['x']";
  G.Attrs.Loc = {"model.py", 12};
  S.addGuard(G);
  TensorSpec T;
  T.PyType = Ty;
  T.DispatchKeys = 0x8001;
  T.DType = 6;
  T.Sizes = {2, std::nullopt};
  T.Strides = {8, 1};
  uint32_t TId = S.addTensorSpec(T);
  Guard TG;
  TG.Kind = GuardKind::TensorMatch;
  TG.Operands = {XId};
  TG.Tensor = TId;
  TG.Attrs.Source = "L['x']";
  GuardOrigin O;
  O.GuardType = "TENSOR_MATCH";
  O.Name = "x";
  O.HasValue = O.ValueIsParameter = true;
  TG.Origin = S.addOrigin(O);
  S.addGuard(TG);
  return S;
}

TEST(PrinterTest, PrintsEveryPart) {
  std::string Text = printGuardSet(makeSet());
  EXPECT_EQ(Text, "guard_set \"forward_0\" {\n"
                  "  object #0 = type \"<class 'float'>\"\n"
                  "  object #1 = key strong \"'x'\"\n"
                  "  tensor 0 = pytype=#0 keys=0x8001 dtype=6 device=-1 "
                  "requires_grad=false sizes=[2, ?] strides=[8, 1]\n"
                  "  origin 0 = \"TENSOR_MATCH\" name=\"x\" has_value "
                  "parameter\n"
                  "  %0 = root source=\"L\"\n"
                  "  %1 = frame_local %0 name=\"x\" index=1 key=#1 "
                  "source=\"L['x']\"\n"
                  "  guard type_match %1 object=#0 source=\"L['x']\" "
                  "loc=\"model.py\":12\n"
                  "  guard tensor_match %1 tensor=0 origin=0 "
                  "source=\"L['x']\"\n"
                  "}\n");
}

TEST(PrinterTest, QuotesSpecialCharacters) {
  EXPECT_EQ(quoteString("a\"b\\c\nd\x01"), "\"a\\\"b\\\\c\\nd\\x01\"");
  EXPECT_EQ(quoteString(""), "\"\"");
}

TEST(PrinterTest, AddressesAreNotPrinted) {
  GuardSet A = makeSet(), B = makeSet();
  B.objects()[0].Address = 0x1234;
  EXPECT_EQ(printGuardSet(A), printGuardSet(B));
}

} // namespace
