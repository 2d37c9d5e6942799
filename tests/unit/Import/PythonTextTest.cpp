//===- PythonTextTest.cpp - Scanning Dynamo's verbose code parts ----------===//
#include "PythonText.h"

#include <gtest/gtest.h>

using namespace guardjit;

namespace {

TEST(PythonText, SplitCommentKeepsStringConstantsWhole) {
  auto [Code, Comment] = pytext::splitComment(
      "L['s'] == 'a  # b'                 # s = s + 1  # m.py:3 in f");
  EXPECT_EQ(Code, "L['s'] == 'a  # b'");
  EXPECT_EQ(Comment, "s = s + 1  # m.py:3 in f");
  auto [Code2, Comment2] = pytext::splitComment("___check_torch_function_mode_stack()");
  EXPECT_EQ(Code2, "___check_torch_function_mode_stack()");
  EXPECT_TRUE(Comment2.empty());
  // An escaped quote does not end the literal.
  auto [Code3, Comment3] = pytext::splitComment("x == 'it\\'s  # no'  # f.py:1 in g");
  EXPECT_EQ(Code3, "x == 'it\\'s  # no'");
  EXPECT_EQ(Comment3, "f.py:1 in g");
}

TEST(PythonText, SplitArgsAtTopLevelCommas) {
  auto Args = pytext::splitArgs("L['a, b'], (1, 2), {3: [4, 5]}, f(x, y)");
  ASSERT_EQ(Args.size(), 4u);
  EXPECT_EQ(Args[0], "L['a, b']");
  EXPECT_EQ(Args[1], "(1, 2)");
  EXPECT_EQ(Args[2], "{3: [4, 5]}");
  EXPECT_EQ(Args[3], "f(x, y)");
  EXPECT_TRUE(pytext::splitArgs("").empty());
  // Unbalanced text never fails, it only yields fewer pieces.
  EXPECT_EQ(pytext::splitArgs("(a, b").size(), 1u);
  EXPECT_EQ(pytext::splitArgs("'a, b").size(), 1u);
}

TEST(PythonText, CallArgsNeedsTheMatchingParenthesis) {
  auto C = pytext::callArgs("check_tensor(L['x'], f(1), size=[2])  tail", "check_tensor");
  ASSERT_TRUE(C);
  EXPECT_EQ(C->first, "L['x'], f(1), size=[2]");
  EXPECT_EQ(C->second, "  tail");
  EXPECT_FALSE(pytext::callArgs("check_tensor(L['x'], f(1)", "check_tensor"));
  EXPECT_FALSE(pytext::callArgs("check_tensorX(1)", "check_tensor"));
  auto Q = pytext::callArgs("f(')')", "f");
  ASSERT_TRUE(Q);
  EXPECT_EQ(Q->first, "')'");
}

TEST(PythonText, SplitOperatorOutsideStringsAndBrackets) {
  auto S = pytext::splitOperator("L['a is b'] is f(x is y)", "is");
  ASSERT_TRUE(S);
  EXPECT_EQ(S->first, "L['a is b']");
  EXPECT_EQ(S->second, "f(x is y)");
  EXPECT_FALSE(pytext::splitOperator("L['a is b']", "is"));
  EXPECT_FALSE(pytext::splitOperator("this island", "is"));
  EXPECT_FALSE(pytext::splitOperator(" is x", "is"));
}

TEST(PythonText, PlainStr) {
  EXPECT_EQ(pytext::plainStr("'abc'"), llvm::StringRef("abc"));
  EXPECT_EQ(pytext::plainStr("\"it's\""), llvm::StringRef("it's"));
  EXPECT_FALSE(pytext::plainStr("'a\\nb'"));
  EXPECT_FALSE(pytext::plainStr("abc"));
  EXPECT_FALSE(pytext::plainStr("'"));
  EXPECT_FALSE(pytext::plainStr("'a'b'"));
}

TEST(PythonText, UserLocIsTheLastFrame) {
  UserLoc L = pytext::userLoc("y = f(x)  # model/net.py:35 in forward (HINT: type Linear)");
  EXPECT_EQ(L.File, "model/net.py");
  EXPECT_EQ(L.Line, 35u);
  L = pytext::userLoc("_dynamo/output_graph.py:1135 in init_ambient_guards");
  EXPECT_EQ(L.File, "_dynamo/output_graph.py");
  EXPECT_EQ(L.Line, 1135u);
  EXPECT_TRUE(pytext::userLoc("(unknown source L['x'], please file a bug)").empty());
  EXPECT_TRUE(pytext::userLoc("f.py:99999999999 in g").empty());
  EXPECT_TRUE(pytext::userLoc("").empty());
}

} // namespace
