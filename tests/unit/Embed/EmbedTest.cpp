//===- EmbedTest.cpp - Tests of the embedding API (guardjit.h) ------------===//
//
// Embeds CPython (no torch) and drives guardjit.h as a host would: load,
// bind by callback and by name, compile blocking and in the background,
// check, stats, evict; and every misuse the header promises is an error.
//
//===----------------------------------------------------------------------===//
#include "guardjit/guardjit.h"

#include "guardjit/Runtime/Python.h"

#include <gtest/gtest.h>

#include <string>

using namespace guardjit::embed;

namespace {

class PythonEnvironment : public ::testing::Environment {
public:
  void SetUp() override { Py_InitializeEx(0); }
};
const ::testing::Environment *const Env =
    ::testing::AddGlobalTestEnvironment(new PythonEnvironment);

std::string header() {
  return std::string("gir torch=\"") + torchVersion() + "\" guardjit=\"" +
         guardjitVersion() + "\"\n\n";
}

// x must be the int 3; `y` must be None.
const char *Body = R"(guard_set "unit 0" {
  object #0 = key strong "'x'" name="lit:'x'"
  object #1 = type "<class 'int'>" name="py:builtins.int"
  object #2 = constant strong "3" name="lit:3"
  object #3 = key strong "'y'" name="lit:'y'"
  %0 = root source="L"
  %1 = frame_local %0 name="x" index=0 key=#0 source="L['x']"
  %2 = frame_local %0 name="y" index=1 key=#3 source="L['y']"
  guard type_match %1 object=#1 source="L['x']"
  guard equals_match %1 object=#2 source="L['x']"
  guard none_match %2 source="L['y']"
}
)";

std::unique_ptr<Runtime> makeRuntime() {
  std::unique_ptr<Runtime> R;
  Status S = Runtime::create(RuntimeOptions(), &R);
  EXPECT_TRUE(S.ok()) << S.message();
  return R;
}

std::unique_ptr<LoadedSet> loadOne(Runtime &R, const std::string &Text) {
  std::vector<std::unique_ptr<LoadedSet>> Sets;
  Status S = R.load(Text, LoadOptions(), &Sets);
  EXPECT_TRUE(S.ok()) << S.message();
  EXPECT_EQ(Sets.size(), 1u);
  return Sets.empty() ? nullptr : std::move(Sets[0]);
}

/// {'x': X, 'y': None} as a new dict.
PyObject *locals(PyObject *X) {
  PyObject *D = PyDict_New();
  PyDict_SetItemString(D, "x", X);
  PyDict_SetItemString(D, "y", Py_None);
  return D;
}

bool checkOf(LoadedSet &S, long X) {
  PyObject *V = PyLong_FromLong(X);
  PyObject *D = locals(V);
  bool Pass = false;
  Status St = S.check(D, &Pass);
  EXPECT_TRUE(St.ok()) << St.message();
  Py_DECREF(D);
  Py_DECREF(V);
  return Pass;
}

TEST(EmbedTest, BindByNameCompileCheckEvict) {
  auto R = makeRuntime();
  auto S = loadOne(*R, header() + Body);
  ASSERT_TRUE(S);
  EXPECT_EQ(S->name(), "unit 0");
  EXPECT_EQ(S->argumentNames(), (std::vector<std::string>{"x", "y"}));
  ASSERT_EQ(S->objects().size(), 4u);
  EXPECT_EQ(S->objects()[1].Name, "py:builtins.int");

  // Unbound: check is refused.
  bool Pass = true;
  PyObject *D = locals(Py_None);
  EXPECT_EQ(S->check(D, &Pass).code(), ErrorCode::Unbound);

  Status B = S->bindByName({});
  ASSERT_TRUE(B.ok()) << B.message();
  EXPECT_EQ(S->bindByName({}).code(), ErrorCode::InvalidArgument); // twice

  // The interpreter answers before any code exists.
  EXPECT_TRUE(checkOf(*S, 3));
  EXPECT_FALSE(checkOf(*S, 4));
  EXPECT_FALSE(S->stats().Native);

  Status C = S->compile();
  ASSERT_TRUE(C.ok()) << C.message();
  EXPECT_TRUE(S->stats().Native);
  EXPECT_TRUE(checkOf(*S, 3));
  EXPECT_FALSE(checkOf(*S, 4));
  EXPECT_FALSE(S->check(D, &Pass).code() != ErrorCode::Ok);
  EXPECT_FALSE(Pass); // x is None

  std::string Where;
  ASSERT_TRUE(S->explain(D, &Where).ok());
  EXPECT_NE(Where.find("TYPE_MATCH on L['x']"), std::string::npos) << Where;

  SetStats St = S->stats();
  EXPECT_EQ(St.Guards, 3u);
  EXPECT_EQ(St.Checks, 5u);
  EXPECT_EQ(St.Hits, 2u);
  EXPECT_EQ(St.Misses, 3u);
  EXPECT_GT(St.CompileMs, 0.0);

  // Positional arguments, by argumentNames().
  PyObject *Three = PyLong_FromLong(3);
  void *Args[] = {Three, Py_None};
  ASSERT_TRUE(S->checkArgs(Args, 2, &Pass).ok());
  EXPECT_TRUE(Pass);
  Status Arity = S->checkArgs(Args, 1, &Pass);
  EXPECT_EQ(Arity.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(Arity.message().find("takes 2 argument(s), got 1"),
            std::string::npos);
  EXPECT_EQ(S->check(Three, &Pass).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(S->check(nullptr, &Pass).code(), ErrorCode::InvalidArgument);

  S->evict();
  EXPECT_TRUE(S->evicted());
  EXPECT_EQ(S->check(D, &Pass).code(), ErrorCode::Evicted);
  EXPECT_EQ(S->checkArgs(Args, 2, &Pass).code(), ErrorCode::Evicted);
  EXPECT_EQ(S->compile().code(), ErrorCode::Evicted);
  EXPECT_EQ(S->bindByName({}).code(), ErrorCode::Evicted);
  S->evict(); // idempotent
  Py_DECREF(Three);
  Py_DECREF(D);
}

TEST(EmbedTest, BindByCallbackAndBackgroundCompile) {
  auto R = makeRuntime();
  auto S = loadOne(*R, header() + Body);
  ASSERT_TRUE(S);
  PyObject *KeyX = PyUnicode_FromString("x"), *KeyY = PyUnicode_FromString("y");
  PyObject *Three = PyLong_FromLong(3);
  std::vector<uint32_t> Seen;
  Status B = S->bind([&](const ObjectInfo &O) -> void * {
    Seen.push_back(O.Index);
    switch (O.Index) {
    case 0:
      return KeyX;
    case 1:
      return &PyLong_Type;
    case 2:
      return Three;
    default:
      return KeyY;
    }
  });
  ASSERT_TRUE(B.ok()) << B.message();
  EXPECT_EQ(Seen, (std::vector<uint32_t>{0, 1, 2, 3}));
  // guardjit holds its own references: the host may drop its own.
  Py_DECREF(KeyX);
  Py_DECREF(KeyY);
  Py_DECREF(Three);

  ASSERT_TRUE(S->compile(/*Background=*/true).ok());
  EXPECT_TRUE(checkOf(*S, 3)); // interpreter or code, whichever is there
  Py_BEGIN_ALLOW_THREADS;
  Status W = S->waitForCode();
  EXPECT_TRUE(W.ok()) << W.message();
  Py_END_ALLOW_THREADS;
  EXPECT_TRUE(S->stats().Native);
  EXPECT_TRUE(checkOf(*S, 3));
  EXPECT_FALSE(checkOf(*S, 2));
}

TEST(EmbedTest, UnboundObjectsAreErrors) {
  auto R = makeRuntime();
  auto S = loadOne(*R, header() + Body);
  ASSERT_TRUE(S);
  Status B = S->bind([](const ObjectInfo &O) -> void * {
    return O.Index == 2 ? nullptr : Py_None;
  });
  EXPECT_EQ(B.code(), ErrorCode::Unbound);
  EXPECT_NE(B.message().find("object #2 (constant 3) is unbound"),
            std::string::npos)
      << B.message();
  // The wrong kind of object for a guard: bind refuses it.
  B = S->bind([](const ObjectInfo &) -> void * { return Py_None; });
  EXPECT_EQ(B.code(), ErrorCode::InvalidArgument) << B.message();
  EXPECT_NE(B.message().find("must be a type"), std::string::npos)
      << B.message();
  // A name the host does not supply and Python cannot resolve.
  auto T = loadOne(*R, header() + std::string(Body).replace(
                                      std::string(Body).find("py:builtins.int"),
                                      15, "host:the-int-type"));
  ASSERT_TRUE(T);
  B = T->bindByName({});
  EXPECT_EQ(B.code(), ErrorCode::Unbound);
  EXPECT_NE(B.message().find("'host:the-int-type' is unbound"),
            std::string::npos)
      << B.message();
  ASSERT_TRUE(T->bindByName({{"host:the-int-type", &PyLong_Type}}).ok());
  EXPECT_TRUE(checkOf(*T, 3));
  // No callback.
  auto U = loadOne(*R, header() + Body);
  EXPECT_EQ(U->bind(BindCallback()).code(), ErrorCode::InvalidArgument);
}

TEST(EmbedTest, VersionHeaderIsEnforced) {
  auto R = makeRuntime();
  std::vector<std::unique_ptr<LoadedSet>> Sets;
  LoadOptions O;
  O.BufferName = "saved.gir";
  Status S = R->load(Body, O, &Sets);
  EXPECT_EQ(S.code(), ErrorCode::VersionMismatch);
  EXPECT_NE(S.message().find("no 'gir torch="), std::string::npos);
  std::string Other = std::string("gir torch=\"2.12.0\" guardjit=\"") +
                      guardjitVersion() + "\"\n" + Body;
  S = R->load(Other, O, &Sets);
  EXPECT_EQ(S.code(), ErrorCode::VersionMismatch);
  EXPECT_NE(S.message().find("recorded with torch 2.12.0"), std::string::npos)
      << S.message();
  std::string OtherJit = std::string("gir torch=\"") + torchVersion() +
                         "\" guardjit=\"0.0.1\"\n" + Body;
  EXPECT_EQ(R->load(OtherJit, O, &Sets).code(), ErrorCode::VersionMismatch);
  EXPECT_TRUE(Sets.empty());
  O.AllowVersionMismatch = true;
  S = R->load(Other, O, &Sets);
  EXPECT_TRUE(S.ok()) << S.message();
  EXPECT_EQ(Sets.size(), 1u);
}

TEST(EmbedTest, MalformedTextHasLocations) {
  auto R = makeRuntime();
  std::vector<std::unique_ptr<LoadedSet>> Sets;
  LoadOptions O;
  O.BufferName = "bad.gir";
  std::string Text = header() + "guard_set \"u\" {\n  guard type_match %7\n}\n";
  Status S = R->load(Text, O, &Sets);
  EXPECT_EQ(S.code(), ErrorCode::ParseError);
  EXPECT_NE(S.message().find("bad.gir:4:"), std::string::npos) << S.message();
  S = R->load(header() + "guard_set \"u\" {\n  bogus\n}\n", O, &Sets);
  EXPECT_EQ(S.code(), ErrorCode::ParseError);
  EXPECT_NE(S.message().find("bad.gir:4:3: error: expected 'object'"),
            std::string::npos)
      << S.message();
  S = R->load(Body + header(), O, &Sets); // header after a set
  EXPECT_EQ(S.code(), ErrorCode::ParseError);
  EXPECT_NE(S.message().find("must come before every guard set"),
            std::string::npos)
      << S.message();
  EXPECT_EQ(R->load(Body, O, nullptr).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(R->loadFile("/nonexistent.gir", O, &Sets).code(),
            ErrorCode::InvalidArgument);
  EXPECT_TRUE(Sets.empty());
}

TEST(EmbedTest, TorchGuardsNeedEnableTorch) {
  auto R = makeRuntime();
  auto S = loadOne(*R, header() + R"(guard_set "g" {
  object #0 = state strong "<GlobalStateGuard>" name="host:gs"
  %0 = root source="L"
  guard global_state object=#0 str="{}" source="L"
}
)");
  ASSERT_TRUE(S);
  Status B = S->bindByName({{"host:gs", Py_None}});
  EXPECT_EQ(B.code(), ErrorCode::Unsupported) << B.message();
  std::unique_ptr<Runtime> T;
  RuntimeOptions O;
  O.EnableTorch = true;
  EXPECT_EQ(Runtime::create(O, &T).code(), ErrorCode::Unsupported); // no torch
}

TEST(EmbedTest, SetOutlivesRuntime) {
  auto R = makeRuntime();
  auto S = loadOne(*R, header() + Body);
  ASSERT_TRUE(S->bindByName({}).ok());
  ASSERT_TRUE(S->compile().ok());
  R.reset();
  EXPECT_TRUE(checkOf(*S, 3));
}

} // namespace
