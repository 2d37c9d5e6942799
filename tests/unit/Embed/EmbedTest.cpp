//===- EmbedTest.cpp - Tests of the embedding API (guardjit.h) ------------===//
//
// Embeds CPython (no torch) and drives guardjit.h as a host would: load,
// bind by callback and by name, compile blocking and in the background,
// check, stats, evict; and every misuse the header promises is an error.
// The life of a check is lib/Check's, as for the Python plugin: first-call
// probation, the background tier-up swap and subtree skipping each have a
// test here.
//
//===----------------------------------------------------------------------===//
#include "guardjit/guardjit.h"

#include "guardjit/Check/TierUp.h"
#include "guardjit/Runtime/Python.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

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

/// Runs `Code` in a fresh namespace and returns its `Name` (new reference).
PyObject *pythonObject(const char *Code, const char *Name) {
  PyObject *G = PyDict_New();
  PyDict_SetItemString(G, "__builtins__", PyEval_GetBuiltins());
  PyObject *R = PyRun_String(Code, Py_file_input, G, G);
  if (!R)
    PyErr_Print();
  Py_XDECREF(R);
  PyObject *O = PyDict_GetItemString(G, Name);
  Py_XINCREF(O);
  Py_DECREF(G);
  return O;
}

// x must be an int, and `seen(x)` (a Python function that counts its
// calls) true: the count shows which checks ran.
const char *LambdaBody = R"(guard_set "lambda" {
  object #0 = key strong "'x'" name="lit:'x'"
  object #1 = type "<class 'int'>" name="py:builtins.int"
  object #2 = callable strong "<function seen>" name="host:seen"
  %0 = root source="L"
  %1 = frame_local %0 name="x" index=0 key=#0 source="L['x']"
  guard type_match %1 object=#1 source="L['x']"
  guard lambda %1 object=#2 source="L['x']"
}
)";

const char *SeenCode = R"py(
calls = [0]
def seen(x):
    calls[0] += 1
    return True
)py";

long seenCalls(PyObject *Seen) {
  PyObject *G = PyFunction_GetGlobals(Seen); // borrowed
  PyObject *Calls = PyDict_GetItemString(G, "calls");
  return PyLong_AsLong(PyList_GetItem(Calls, 0));
}

TEST(EmbedTest, FirstCallOfNewCodeAlsoRunsTheInterpreter) {
  auto R = makeRuntime();
  auto S = loadOne(*R, header() + LambdaBody);
  ASSERT_TRUE(S);
  PyObject *Seen = pythonObject(SeenCode, "seen");
  ASSERT_TRUE(Seen);
  ASSERT_TRUE(S->bindByName({{"host:seen", Seen}}).ok());
  // Interpreted: one call of the guard per check.
  EXPECT_TRUE(checkOf(*S, 3));
  EXPECT_EQ(seenCalls(Seen), 1);
  ASSERT_TRUE(S->compile().ok());
  EXPECT_EQ(S->stats().Probations, 0u);
  // The first call of the new code: native, then the interpreter beside it.
  EXPECT_TRUE(checkOf(*S, 3));
  EXPECT_EQ(seenCalls(Seen), 3);
  EXPECT_EQ(S->stats().Probations, 1u);
  // Verified: the code alone from now on.
  EXPECT_TRUE(checkOf(*S, 4));
  EXPECT_EQ(seenCalls(Seen), 4);
  SetStats St = S->stats();
  EXPECT_EQ(St.Probations, 1u);
  EXPECT_TRUE(St.Native);
  EXPECT_FALSE(St.Distrusted);
  S->evict();
  Py_DECREF(Seen);
}

TEST(EmbedTest, BackgroundCompileSwapsInTheTierUpLevel) {
  RuntimeOptions O;
  O.Level = CodeLevel::O0;
  O.TierUpLevel = CodeLevel::O1;
  std::unique_ptr<Runtime> R;
  ASSERT_TRUE(Runtime::create(O, &R).ok());
  auto S = loadOne(*R, header() + Body);
  ASSERT_TRUE(S);
  int64_t Live = guardjit::CheckTarget::Live.load();
  ASSERT_TRUE(S->bindByName({}).ok());
  guardjit::TierUpStats Before = guardjit::tierUpStats();
  ASSERT_TRUE(S->compile(/*Background=*/true).ok());
  EXPECT_TRUE(checkOf(*S, 3)); // the interpreter or O0 code, as it lands
  Py_BEGIN_ALLOW_THREADS;
  Status W = S->waitForCode();
  EXPECT_TRUE(W.ok()) << W.message();
  Py_END_ALLOW_THREADS;
  // Two compiles on the background thread, both swapped in: O0, then O1.
  guardjit::TierUpStats After = guardjit::tierUpStats();
  EXPECT_EQ(After.Scheduled - Before.Scheduled, 2u);
  EXPECT_EQ(After.Installed - Before.Installed, 2u);
  EXPECT_EQ(After.Failed - Before.Failed, 0u);
  SetStats St = S->stats();
  EXPECT_TRUE(St.Native);
  EXPECT_EQ(St.Level, CodeLevel::O1);
  EXPECT_TRUE(checkOf(*S, 3));
  EXPECT_FALSE(checkOf(*S, 4));
  // The O1 code was on probation for its first call.
  EXPECT_GE(S->stats().Probations, 1u);
  EXPECT_FALSE(S->stats().Distrusted);
  EXPECT_TRUE(S->compile(true).ok()); // compiled already: nothing queued
  EXPECT_EQ(guardjit::tierUpStats().Scheduled, After.Scheduled);
  // Evict frees the target at once, though the compile thread held it.
  EXPECT_EQ(guardjit::CheckTarget::Live.load(), Live + 1);
  S->evict();
  EXPECT_EQ(guardjit::CheckTarget::Live.load(), Live);
}

TEST(EmbedTest, StatsAndWaitForCodeRunWhileTheSetIsEvicted) {
  // stats() and waitForCode() may be called from any thread while another
  // evicts the set: neither may see the target freed under it, nor be left
  // holding its last reference.
  auto R = makeRuntime();
  for (int Round = 0; Round < 20; ++Round) {
    auto S = loadOne(*R, header() + Body);
    ASSERT_TRUE(S);
    ASSERT_TRUE(S->bindByName({}).ok());
    ASSERT_TRUE(S->compile(/*Background=*/true).ok());
    std::atomic<bool> Stop{false};
    std::atomic<uint64_t> Reads{0};
    std::vector<std::thread> Readers;
    for (int K = 0; K < 2; ++K)
      Readers.emplace_back([&, K] {
        while (!Stop.load()) {
          if (K == 0)
            (void)S->stats();
          else
            (void)S->waitForCode();
          Reads.fetch_add(1);
        }
      });
    Py_BEGIN_ALLOW_THREADS;
    while (Reads.load() < 4)
      std::this_thread::yield();
    Py_END_ALLOW_THREADS;
    S->evict();
    Stop.store(true);
    Py_BEGIN_ALLOW_THREADS;
    for (std::thread &T : Readers)
      T.join();
    Py_END_ALLOW_THREADS;
    bool Pass = true;
    PyObject *Locals = PyDict_New();
    Status C = S->check(Locals, &Pass);
    Py_DECREF(Locals);
    EXPECT_EQ(C.code(), ErrorCode::Evicted);
    EXPECT_EQ(S->stats().Checks, 0u);
  }
}

const char *NodeCode = R"py(
class Node:
    def __init__(self):
        self.scale = 0.5
)py";

// L['m'] is a Node whose scale is 0.5: the equality is implied by "m's
// __dict__ is unchanged"; the type check stays in the residual check.
const char *SkipBody = R"(guard_set "skip" {
  object #0 = key strong "'m'" name="lit:'m'"
  object #1 = type "<class 'Node'>" name="host:Node"
  object #2 = key strong "'scale'" name="lit:'scale'"
  object #3 = constant strong "0.5" name="lit:0.5"
  %0 = root source="L"
  %1 = frame_local %0 name="m" index=0 key=#0 source="L['m']"
  %2 = getattr %1 name="scale" key=#2 source="L['m'].scale"
  guard type_match %1 object=#1 source="L['m']"
  guard equals_match %2 object=#3 source="L['m'].scale"
}
)";

bool checkLocals(LoadedSet &S, PyObject *D) {
  bool Pass = false;
  Status St = S.check(D, &Pass);
  EXPECT_TRUE(St.ok()) << St.message();
  return Pass;
}

TEST(EmbedTest, SubtreeSkipHitsUntilTheObjectChanges) {
  auto R = makeRuntime();
  auto S = loadOne(*R, header() + SkipBody);
  ASSERT_TRUE(S);
  PyObject *NodeType = pythonObject(NodeCode, "Node");
  ASSERT_TRUE(NodeType);
  int64_t Live = guardjit::CheckTarget::Live.load();
  ASSERT_TRUE(S->bindByName({{"host:Node", NodeType}}).ok());
  PyObject *M = PyObject_CallNoArgs(NodeType);
  PyObject *D = PyDict_New();
  PyDict_SetItemString(D, "m", M);
  Status E = S->enableSubtreeSkip(D, /*CostModel=*/false);
  ASSERT_TRUE(E.ok()) << E.message();
  EXPECT_TRUE(S->stats().SubtreeSkip);

  // Interpreted set: skipping at once. The first check records, the next
  // ones validate and run the residual check only.
  EXPECT_TRUE(checkLocals(*S, D));
  EXPECT_EQ(S->stats().SkipHits, 0u);
  EXPECT_TRUE(checkLocals(*S, D));
  EXPECT_TRUE(checkLocals(*S, D));
  EXPECT_EQ(S->stats().SkipHits, 2u);

  // A change the validation sees: the full check answers.
  PyObject *Other = PyFloat_FromDouble(0.75);
  PyObject_SetAttrString(M, "scale", Other);
  EXPECT_FALSE(checkLocals(*S, D));
  EXPECT_EQ(S->stats().SkipFallbacks, 1u);
  PyObject *Half = PyFloat_FromDouble(0.5);
  PyObject_SetAttrString(M, "scale", Half);
  EXPECT_TRUE(checkLocals(*S, D)); // full check, records again

  // Native: the residual check is compiled too, and skipping resumes.
  ASSERT_TRUE(S->compile().ok());
  Py_BEGIN_ALLOW_THREADS;
  Status W = S->waitForCode();
  EXPECT_TRUE(W.ok()) << W.message();
  Py_END_ALLOW_THREADS;
  EXPECT_TRUE(S->stats().ResidualNative);
  uint64_t Hits = S->stats().SkipHits;
  EXPECT_TRUE(checkLocals(*S, D));
  EXPECT_TRUE(checkLocals(*S, D));
  EXPECT_GT(S->stats().SkipHits, Hits);
  EXPECT_EQ(guardjit::CheckTarget::Live.load(), Live + 2); // and the residual
  S->evict();
  EXPECT_EQ(guardjit::CheckTarget::Live.load(), Live);
  Py_DECREF(Half);
  Py_DECREF(Other);
  Py_DECREF(D);
  Py_DECREF(M);
  Py_DECREF(NodeType);
}

} // namespace
