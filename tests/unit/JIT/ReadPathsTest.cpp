//===- ReadPathsTest.cpp - The first tier's read paths and items, differential -===//
//
// Read paths (readPaths, ReadDescriptor::Path: a chain of descriptor reads,
// each the only child of the one before, down to a read that nothing reads)
// and runs of them (gj_rt_read_run), tuple/list items through descriptors:
// at O0 they are one helper call, at the other levels inline code; every
// level must agree with the interpreter, and keep every new reference it
// reads until the check ends, as the interpreter does (a finalizer that
// ran in the middle of the check once changed what a later guard read, or
// freed the run's parent). TEST_Ps of EngineTest (EngineTestSupport.h),
// instantiated at every level in EngineTest.cpp.
//
//===----------------------------------------------------------------------===//
#include "EngineTestSupport.h"

#include "guardjit/Runtime/RuntimeHelpers.h"

#include <string>

using namespace guardjit;
using guardjit::test::Ref;
using guardjit::test::SetBuilder;
using namespace guardjit::test::engine;

namespace {

TEST_P(EngineTest, ReadPathsHoldTheirReferencesToTheEnd) {
  // `q.fresh[0].a` and `q.fn.__code__`: each read the only child of the
  // one before, the last read by nothing but its fused guard (O0: a read
  // path each, ReadDescriptor::Path). The property makes a tuple that only the check
  // holds; its item is borrowed from it and read after it, so the tuple
  // must live until the path ends, and die then.
  exec("import weakref\n"
       "class Q:\n"
       "    made = []\n"
       "    val = 1\n"
       "    empty = False\n"
       "    @property\n"
       "    def fresh(self):\n"
       "        o = C(); o.a = Q.val; Q.made.append(weakref.ref(o))\n"
       "        return () if Q.empty else (o,)\n"
       "q = Q()\n"
       "def fn(): pass\n"
       "def other(): pass\n"
       "q.fn = fn");
  Ref One = eval("1"), Code = eval("fn.__code__"), Fn0 = eval("fn");
  SetBuilder SB;
  ValueId Q = SB.local("q");
  ValueId Item =
      SB.indexed(AccessorKind::TupleGetItem,
                 SB.keyed(AccessorKind::GetAttr, Q, "fresh"), 0);
  SB.guard(GuardKind::EqualsMatch, {SB.keyed(AccessorKind::GetAttr, Item, "a")},
           SB.object(One.get(), ObjectKind::Constant, true));
  SB.guard(GuardKind::IdMatch,
           {SB.unary(AccessorKind::Code, SB.keyed(AccessorKind::GetAttr, Q, "fn"))},
           SB.object(Code.get()));
  BUILD(SB);
  if (GetParam() == OptLevel::O0) {
    auto IR = JIT->emitLLVM(*BS);
    ASSERT_TRUE(!!IR) << toString(IR.takeError());
    // Both paths from `q`: one run of their 5 descriptors.
    EXPECT_NE(IR->find("@gj_rt_read_run(ptr %v1, ptr inttoptr"),
              std::string::npos)
        << *IR;
    EXPECT_NE(IR->find("i64 5, ptr %new_refs, ptr %new_refs.count)"),
              std::string::npos)
        << *IR;
  }
  Ref L = eval("{'q': q}");
  Py_ssize_t FnRefs = Py_REFCNT(Fn0.get());
  auto AllDead = [] {
    Ref Dead = eval("all(w() is None for w in Q.made)");
    return Dead.get() == Py_True;
  };
  for (int I = 0; I < 3; ++I)
    EXPECT_TRUE(both(*BS, Fn, L.get()));
  EXPECT_TRUE(AllDead());
  exec("Q.val = 2"); // the last read's fused check fails
  EXPECT_FALSE(both(*BS, Fn, L.get()));
  EXPECT_TRUE(AllDead());
  exec("Q.val = 1; Q.empty = True"); // the middle read fails
  EXPECT_FALSE(both(*BS, Fn, L.get()));
  EXPECT_TRUE(AllDead());
  exec("Q.empty = False; q.fn = other"); // the second path's fused check
  EXPECT_FALSE(both(*BS, Fn, L.get()));
  exec("q.fn = fn");
  EXPECT_TRUE(both(*BS, Fn, L.get()));
  EXPECT_EQ(Py_REFCNT(Fn0.get()), FnRefs);
  EXPECT_TRUE(AllDead());
}

//===----------------------------------------------------------------------===//
// Hostile inputs (from a breaker's review of the change)
//===----------------------------------------------------------------------===//

/// Runs the interpreter and the native check with `Reset` (Python
/// statements) run before each, so that side effects of one do not leak
/// into the other; reports a disagreement; returns the native answer.
bool bothReset(const BoundGuardSet &BS, CheckFn Fn, PyObject *Locals,
               const char *Reset) {
  exec(Reset);
  bool Interp = interpret(BS, Locals);
  EXPECT_FALSE(PyErr_Occurred()) << "interpreter left an error set";
  PyErr_Clear();
  exec(Reset);
  int Native = Fn(Locals);
  EXPECT_FALSE(PyErr_Occurred()) << "native check left an error set";
  PyErr_Clear();
  EXPECT_EQ(Native == 1, Interp) << "JIT and interpreter disagree on "
                                 << describe(Locals);
  return Native == 1;
}

TEST_P(EngineTest, PathReferencesOutliveLaterGuards) {
  // `q.fresh.x` is a read path at O0: `q.fresh` is a new object only the
  // check holds, whose __del__ writes `s.flag`, which a later guard reads.
  // The interpreter holds new references to the end of the check and reads
  // flag == 1; so must every level (O0 once released it when the path
  // ended, and read 2).
  exec("class BrkState:\n"
       "    flag = 1\n"
       "class BrkFresh:\n"
       "    def __init__(self): self.x = 1\n"
       "    def __del__(self): BrkState.flag = 2\n"
       "class BrkQ:\n"
       "    @property\n"
       "    def fresh(self): return BrkFresh()\n"
       "brk_q = BrkQ()\n");
  Ref One = eval("1");
  SetBuilder SB;
  ObjectId C1 = SB.object(One.get(), ObjectKind::Constant, true);
  ValueId Q = SB.local("q");
  ValueId X = SB.keyed(AccessorKind::GetAttr,
                       SB.keyed(AccessorKind::GetAttr, Q, "fresh"), "x");
  SB.guard(GuardKind::EqualsMatch, {X}, C1);
  SB.guard(GuardKind::EqualsMatch,
           {SB.keyed(AccessorKind::GetAttr, SB.local("s"), "flag")}, C1);
  BUILD(SB);
  Ref L = eval("{'q': brk_q, 's': BrkState}");
  for (int I = 0; I < 3; ++I)
    EXPECT_TRUE(bothReset(*BS, Fn, L.get(), "BrkState.flag = 1"));
}

TEST_P(EngineTest, DeadGetattrReferenceOutlivesLaterGuards) {
  // The same with a single getattr read, not a path: `q.fresh` read by
  // nothing but its fused TYPE_MATCH (O0 once released it in its helper:
  // ReadDescriptor::Release, gone).
  exec("class BrkState2:\n"
       "    flag = 1\n"
       "class BrkFresh2:\n"
       "    def __del__(self): BrkState2.flag = 2\n"
       "class BrkQ2:\n"
       "    @property\n"
       "    def fresh(self): return BrkFresh2()\n"
       "brk_q2 = BrkQ2()\n");
  Ref One = eval("1"), T = eval("BrkFresh2");
  SetBuilder SB;
  ValueId Q = SB.local("q");
  SB.guard(GuardKind::TypeMatch, {SB.keyed(AccessorKind::GetAttr, Q, "fresh")},
           SB.object(T.get(), ObjectKind::Type));
  SB.guard(GuardKind::EqualsMatch,
           {SB.keyed(AccessorKind::GetAttr, SB.local("s"), "flag")},
           SB.object(One.get(), ObjectKind::Constant, true));
  BUILD(SB);
  Ref L = eval("{'q': brk_q2, 's': BrkState2}");
  for (int I = 0; I < 3; ++I)
    EXPECT_TRUE(bothReset(*BS, Fn, L.get(), "BrkState2.flag = 1"));
}

TEST_P(EngineTest, PathIntermediateDiesAfterTheCheck) {
  // The same through a weakref callback on the path's intermediate (a tuple
  // item borrowed from a fresh tuple, read on): the callback runs when the
  // tuple dies, and flips the flag a later guard reads.
  exec("import weakref\n"
       "class BrkState3:\n"
       "    flag = 1\n"
       "class BrkItem3:\n"
       "    def __init__(self): self.a = 1\n"
       "brk_wrs = []\n"
       "def brk_cb(w): BrkState3.flag = 2\n"
       "class BrkQ3:\n"
       "    @property\n"
       "    def fresh(self):\n"
       "        o = BrkItem3(); brk_wrs.append(weakref.ref(o, brk_cb))\n"
       "        return (o,)\n"
       "brk_q3 = BrkQ3()\n");
  Ref One = eval("1");
  SetBuilder SB;
  ObjectId C1 = SB.object(One.get(), ObjectKind::Constant, true);
  ValueId Q = SB.local("q");
  ValueId Item = SB.indexed(AccessorKind::TupleGetItem,
                            SB.keyed(AccessorKind::GetAttr, Q, "fresh"), 0);
  SB.guard(GuardKind::EqualsMatch, {SB.keyed(AccessorKind::GetAttr, Item, "a")},
           C1);
  SB.guard(GuardKind::EqualsMatch,
           {SB.keyed(AccessorKind::GetAttr, SB.local("s"), "flag")}, C1);
  BUILD(SB);
  Ref L = eval("{'q': brk_q3, 's': BrkState3}");
  for (int I = 0; I < 3; ++I)
    EXPECT_TRUE(bothReset(*BS, Fn, L.get(), "BrkState3.flag = 1; brk_wrs.clear()"));
}


TEST_P(EngineTest, ReadPathLengths) {
  // Chains L['q'].n.n...n.v of K getattr reads (the FrameLocal read makes
  // K+1 descriptor reads), around 8, with and without a fused
  // TYPE_MATCH on every intermediate, failing at every depth in three ways,
  // and the last check failing. Every fresh node must be dead after each
  // call, no error left set, the root's refcount unchanged.
  exec("import weakref\n"
       "class BrkCfg:\n"
       "    fail = -1\n"
       "    mode = 'raise'\n"
       "    v = 1\n"
       "brk_nodes = []\n"
       "class BrkNode:\n"
       "    def __init__(self, d):\n"
       "        self.d = d; self.v = BrkCfg.v\n"
       "        brk_nodes.append(weakref.ref(self))\n"
       "    def _next(self):\n"
       "        d = self.d + 1\n"
       "        if d == BrkCfg.fail:\n"
       "            if BrkCfg.mode == 'raise': raise AttributeError('n')\n"
       "            if BrkCfg.mode == 'none': return None\n"
       "            if BrkCfg.mode == 'int': return 5\n"
       "            if BrkCfg.mode == 'sub': return BrkNodeSub(d)\n"
       "        return BrkNode(d)\n"
       "    n = property(_next)\n"
       "    m = property(_next)\n"
       "class BrkNodeSub(BrkNode): pass\n"
       "brk_root = BrkNode(0)\n"
       "def brk_alive(): return sum(1 for w in brk_nodes if w() is not None)\n");
  Ref One = eval("1"), NodeT = eval("BrkNode"), Root = eval("brk_root");
  for (int K : {2, 6, 7, 8, 9, 10, 19, 20}) {
    for (bool Typed : {false, true}) {
      for (bool Sibling : {false, true}) {
        SCOPED_TRACE("K=" + std::to_string(K) + " typed=" +
                     std::to_string(Typed) + " sibling=" +
                     std::to_string(Sibling));
        SetBuilder SB;
        ObjectId C1 = SB.object(One.get(), ObjectKind::Constant, true);
        ObjectId TN = SB.object(NodeT.get(), ObjectKind::Type);
        ValueId V = SB.local("q");
        for (int I = 0; I < K - 1; ++I) {
          V = SB.keyed(AccessorKind::GetAttr, V, "n");
          if (Typed)
            SB.guard(GuardKind::TypeMatch, {V}, TN);
        }
        SB.guard(GuardKind::EqualsMatch,
                 {SB.keyed(AccessorKind::GetAttr, V, "v")}, C1);
        if (Sibling) {
          // A second path from the same parent and a single read, one run.
          ValueId Q = SB.local("q");
          SB.guard(GuardKind::EqualsMatch,
                   {SB.keyed(AccessorKind::GetAttr,
                             SB.keyed(AccessorKind::GetAttr, Q, "m"), "v")},
                   C1);
          SB.guard(GuardKind::EqualsMatch,
                   {SB.keyed(AccessorKind::GetAttr, Q, "v")}, C1);
          SB.guard(GuardKind::EqualsMatch,
                   {SB.keyed(AccessorKind::GetAttr, SB.local("r"), "v")}, C1);
        }
        BUILD(SB);
        Ref L = eval("{'q': brk_root, 'r': brk_root}");
        Py_ssize_t RootRefs = Py_REFCNT(Root.get());
        Py_ssize_t OneRefs = Py_REFCNT(One.get());
        auto Check = [&](const char *Setup, bool Expect) {
          exec(Setup);
          exec("brk_nodes.clear()");
          bool R = both(*BS, Fn, L.get());
          EXPECT_EQ(R, Expect) << Setup;
          Ref Alive = eval("brk_alive()");
          EXPECT_EQ(PyLong_AsLong(Alive.get()), 0) << Setup;
        };
        for (int I = 0; I < 3; ++I)
          Check("BrkCfg.fail = -1; BrkCfg.v = 1", true);
        Check("BrkCfg.fail = -1; BrkCfg.v = 2", false);
        for (int F = 1; F < K; ++F)
          for (const char *Mode : {"raise", "none", "int", "sub"}) {
            std::string Setup = "BrkCfg.v = 1; BrkCfg.fail = " +
                                std::to_string(F) + "; BrkCfg.mode = '" +
                                Mode + "'";
            bool Expect = std::string(Mode) == "sub" && !Typed;
            // `m` fails at depth 1 too.
            if (Sibling && F == 1 && std::string(Mode) != "sub")
              Expect = false;
            Check(Setup.c_str(), Expect);
          }
        Check("BrkCfg.fail = -1; BrkCfg.v = 1", true);
        EXPECT_EQ(Py_REFCNT(Root.get()), RootRefs);
        EXPECT_EQ(Py_REFCNT(One.get()), OneRefs);
      }
    }
  }
}


TEST_P(EngineTest, TupleListItemsOnHostileParents) {
  // TupleGetItem / ListGetItem (PyTuple_GetItem / PyList_GetItem rules:
  // subclasses allowed, no __getitem__ call, no negative index) with every
  // fused guard kind, as a dead read, a path head (`x[i].real`) and a run
  // of sibling items, on hostile parents.
  exec("class BrkTG(tuple):\n"
       "    def __getitem__(self, i): return 99\n"
       "    def __len__(self): return 0\n"
       "class BrkLG(list):\n"
       "    def __getitem__(self, i): return 99\n"
       "    def __len__(self): return 0\n"
       "brk_parents = [(1, None, 1), BrkTG((1, None, 1)), [1, None, 1],\n"
       "               BrkLG([1, None, 1]), (), [], {0: 1, 1: None, 2: 1},\n"
       "               None, 'abc', (1,), [1], (True, False, 1.0),\n"
       "               [2, 3, 4], (10**30, None, 1)]\n");
  Ref One = eval("1"), IntT = eval("int"), Parents = eval("brk_parents");
  const GuardKind Kinds[] = {GuardKind::TypeMatch, GuardKind::IdMatch,
                             GuardKind::EqualsMatch, GuardKind::NotNone,
                             GuardKind::NoneMatch, GuardKind::TrueMatch};
  for (AccessorKind AK : {AccessorKind::TupleGetItem, AccessorKind::ListGetItem})
    for (int64_t Index : {0, 1, 2, 3, 1000, -2})
      for (int Shape = 0; Shape < 3; ++Shape)
        for (int KI = -1; KI < 6; ++KI) {
          SCOPED_TRACE("accessor=" + std::to_string(int(AK)) + " index=" +
                       std::to_string(Index) + " shape=" +
                       std::to_string(Shape) + " kind=" + std::to_string(KI));
          SetBuilder SB;
          ObjectId C1 = SB.object(One.get(), ObjectKind::Constant, true);
          ObjectId TI = SB.object(IntT.get(), ObjectKind::Type);
          ValueId X = SB.local("x");
          ValueId Item = SB.indexed(AK, X, Index);
          auto Guard = [&](ValueId V) {
            if (KI < 0)
              return;
            GuardKind K = Kinds[KI];
            ObjectId O = K == GuardKind::TypeMatch   ? TI
                         : K == GuardKind::IdMatch   ? C1
                         : K == GuardKind::EqualsMatch ? C1
                                                       : InvalidId;
            SB.guard(K, {V}, O);
          };
          Guard(Item);
          if (Shape >= 1) // a path: x[i].real
            SB.guard(GuardKind::EqualsMatch,
                     {SB.keyed(AccessorKind::GetAttr, Item, "real")}, C1);
          if (Shape == 2) { // a sibling item after it, in the same run
            ValueId Other = SB.indexed(AK, X, Index == 0 ? 2 : 0);
            SB.guard(GuardKind::NotNone, {Other});
          }
          if (Shape == 0 && KI < 0)
            SB.guard(GuardKind::NotNone, {SB.local("y")});
          BUILD(SB);
          for (Py_ssize_t P = 0; P < PyList_GET_SIZE(Parents.get()); ++P) {
            Ref L(PyDict_New());
            PyDict_SetItemString(L.get(), "x",
                                 PyList_GET_ITEM(Parents.get(), P));
            PyDict_SetItemString(L.get(), "y", Py_True);
            both(*BS, Fn, L.get());
          }
        }
}

TEST_P(EngineTest, ListItemEqMutatesList) {
  // A fused EQUALS_MATCH on a list item whose __eq__ mutates the list (and
  // the locals dict): the sibling item read after it must see the same list
  // the interpreter sees.
  exec("class BrkEqM:\n"
       "    def __init__(self, what): self.what = what\n"
       "    def __eq__(self, other):\n"
       "        lst = brk_lst\n"
       "        if self.what == 'clear': lst.clear()\n"
       "        elif self.what == 'insert': lst.insert(0, None)\n"
       "        elif self.what == 'pop': lst.pop()\n"
       "        elif self.what == 'replace': lst[1] = None\n"
       "        return True\n"
       "    __hash__ = object.__hash__\n"
       "brk_lst = []\n"
       "brk_c = BrkEqM('const')\n");
  Ref C = eval("brk_c"), One = eval("1");
  for (bool Path : {false, true}) {
    SetBuilder SB;
    ValueId X = SB.local("x");
    ValueId I0 = SB.indexed(AccessorKind::ListGetItem, X, 0);
    SB.guard(GuardKind::EqualsMatch, {I0},
             SB.object(C.get(), ObjectKind::Constant, true));
    ValueId I1 = SB.indexed(AccessorKind::ListGetItem, X, 1);
    if (Path)
      SB.guard(GuardKind::NotNone,
               {SB.keyed(AccessorKind::GetAttr, I1, "what")});
    else
      SB.guard(GuardKind::NotNone, {I1});
    BUILD(SB);
    for (const char *What : {"clear", "insert", "pop", "replace", "none"}) {
      SCOPED_TRACE(std::string(What) + (Path ? " path" : ""));
      std::string Reset = "brk_lst[:] = [BrkEqM('" + std::string(What) +
                          "'), BrkEqM('x')]";
      Ref L = eval("{'x': brk_lst}");
      bothReset(*BS, Fn, L.get(), Reset.c_str());
    }
  }
}


TEST_P(EngineTest, PathEndCannotFreeTheRunParent) {
  // The run's parent `q` is borrowed from the frame locals, which hold its
  // only reference. `q.fresh` is a new object only the check holds; its
  // __del__ pops `q` from the locals and allocates look-alikes with v = 2.
  // The interpreter holds `q.fresh` to the end of the check, so `q.v` is
  // read from the live `q`; so must every level. (At O0 `q.fresh` once died
  // when its path, or its released read, ended inside gj_rt_read_run, and
  // the next step of the same run read `q.v` from the freed `q`: a use
  // after free.)
  exec("class BrkQ4:\n"
       "    def __init__(self): self.v = 1\n"
       "    @property\n"
       "    def fresh(self): return BrkFresh4()\n"
       "class BrkJunk4:\n"
       "    def __init__(self): self.v = 2\n"
       "brk_L4 = {}\n"
       "brk_junk4 = []\n"
       "class BrkFresh4:\n"
       "    def __init__(self): self.x = 1\n"
       "    def __del__(self):\n"
       "        brk_L4.pop('q', None)\n"
       "        brk_junk4.extend(BrkJunk4() for _ in range(200))\n");
  Ref One = eval("1"), FreshT = eval("BrkFresh4");
  for (bool Path : {false, true}) {
    SCOPED_TRACE(Path ? "path q.fresh.x" : "single read q.fresh");
    SetBuilder SB;
    ObjectId C1 = SB.object(One.get(), ObjectKind::Constant, true);
    ValueId Q = SB.local("q");
    ValueId Fresh = SB.keyed(AccessorKind::GetAttr, Q, "fresh");
    if (Path)
      SB.guard(GuardKind::EqualsMatch,
               {SB.keyed(AccessorKind::GetAttr, Fresh, "x")}, C1);
    else
      SB.guard(GuardKind::TypeMatch, {Fresh},
               SB.object(FreshT.get(), ObjectKind::Type));
    SB.guard(GuardKind::EqualsMatch, {SB.keyed(AccessorKind::GetAttr, Q, "v")},
             C1);
    BUILD(SB);
    Ref L = eval("brk_L4");
    for (int I = 0; I < 3; ++I)
      EXPECT_TRUE(bothReset(*BS, Fn, L.get(),
                            "brk_junk4.clear(); brk_L4['q'] = BrkQ4()"));
  }
}


TEST_P(EngineTest, MixedPathsRefcountsAndFreshContainers) {
  // Paths through every descriptor accessor (getattr, getitem, tuple and
  // list items, dict get item, __code__ of a bound method), where each
  // container on the way is fresh (only the check holds it) and its items
  // change between calls; a module read path through fresh modules.
  exec("import types, weakref\n"
       "brk_w5 = []\n"
       "class BrkCfg5:\n"
       "    v = 1\n"
       "    fail = ''\n"
       "class BrkLeaf5:\n"
       "    def __init__(self):\n"
       "        self.v = BrkCfg5.v\n"
       "        brk_w5.append(weakref.ref(self))\n"
       "    def meth(self): pass\n"
       "class BrkMap5:\n"
       "    def __getitem__(self, k):\n"
       "        if BrkCfg5.fail == 'getitem': raise KeyError(k)\n"
       "        return {'d': [(BrkLeaf5(),)]}\n"
       "class BrkQ5:\n"
       "    @property\n"
       "    def fresh(self):\n"
       "        if BrkCfg5.fail == 'fresh': raise RuntimeError('boom')\n"
       "        m = BrkMap5(); brk_w5.append(weakref.ref(m)); return m\n"
       "    @property\n"
       "    def mod(self):\n"
       "        m = types.ModuleType('brkmod'); m.sub = types.ModuleType('s')\n"
       "        m.sub.x = BrkCfg5.v; brk_w5.append(weakref.ref(m))\n"
       "        return m\n"
       "    @property\n"
       "    def leaf(self): return BrkLeaf5()\n"
       "brk_q5 = BrkQ5()\n"
       "brk_code5 = BrkLeaf5.meth.__code__\n"
       "def brk_alive5(): return sum(1 for w in brk_w5 if w() is not None)\n");
  Ref One = eval("1"), Code = eval("brk_code5"), Q = eval("brk_q5"),
      Meth = eval("BrkLeaf5.meth");
  SetBuilder SB;
  ObjectId C1 = SB.object(One.get(), ObjectKind::Constant, true);
  ValueId LQ = SB.local("q");
  // q.fresh['k']['d'][0][0].v == 1   (getattr, getitem, dict, list, tuple,
  // getattr: 7 descriptor reads with L['q'])
  ValueId V = SB.keyed(AccessorKind::GetAttr, LQ, "fresh");
  V = SB.keyed(AccessorKind::GetItem, V, "k");
  V = SB.keyed(AccessorKind::DictGetItem, V, "d");
  V = SB.indexed(AccessorKind::ListGetItem, V, 0);
  V = SB.indexed(AccessorKind::TupleGetItem, V, 0);
  SB.guard(GuardKind::EqualsMatch, {SB.keyed(AccessorKind::GetAttr, V, "v")},
           C1);
  // q.leaf.meth.__code__ is brk_code5
  SB.guard(GuardKind::IdMatch,
           {SB.unary(AccessorKind::Code,
                     SB.keyed(AccessorKind::GetAttr,
                              SB.keyed(AccessorKind::GetAttr, LQ, "leaf"),
                              "meth"))},
           SB.object(Code.get()));
  // q.mod.sub.x == 1 (module getattr memos on fresh modules)
  SB.guard(GuardKind::EqualsMatch,
           {SB.keyed(AccessorKind::GetAttr,
                     SB.keyed(AccessorKind::GetAttr,
                              SB.keyed(AccessorKind::GetAttr, LQ, "mod"),
                              "sub"),
                     "x")},
           C1);
  BUILD(SB);
  if (GetParam() == OptLevel::O0) {
    auto IR = JIT->emitLLVM(*BS);
    ASSERT_TRUE(!!IR);
    EXPECT_NE(IR->find("gj_rt_read_run"), std::string::npos) << *IR;
  }
  Ref L = eval("{'q': brk_q5}");
  exec("brk_meth5 = BrkLeaf5.meth");
  Py_ssize_t QRefs = Py_REFCNT(Q.get()), CodeRefs = Py_REFCNT(Code.get()),
             OneRefs = Py_REFCNT(One.get()), MethRefs = Py_REFCNT(Meth.get());
  struct Case {
    const char *Setup;
    bool Expect;
  } Cases[] = {
      {"BrkCfg5.v = 1; BrkCfg5.fail = ''", true},
      {"BrkCfg5.v = 2; BrkCfg5.fail = ''", false},
      {"BrkCfg5.v = 1; BrkCfg5.fail = 'getitem'", false},
      {"BrkCfg5.v = 1; BrkCfg5.fail = 'fresh'", false},
      {"BrkCfg5.v = 1; BrkCfg5.fail = ''", true},
      {"BrkCfg5.v = 1; BrkLeaf5.meth = lambda self: None", false},
      {"BrkCfg5.v = 1; BrkLeaf5.meth = brk_meth5", true},
  };
  for (int Round = 0; Round < 4; ++Round)
    for (const Case &C : Cases) {
      SCOPED_TRACE(C.Setup);
      exec(C.Setup);
      exec("brk_w5.clear()");
      EXPECT_EQ(both(*BS, Fn, L.get()), C.Expect);
      Ref Alive = eval("brk_alive5()");
      EXPECT_EQ(PyLong_AsLong(Alive.get()), 0);
    }
  EXPECT_EQ(Py_REFCNT(Q.get()), QRefs);
  EXPECT_EQ(Py_REFCNT(Code.get()), CodeRefs);
  EXPECT_EQ(Py_REFCNT(One.get()), OneRefs);
  EXPECT_EQ(Py_REFCNT(Meth.get()), MethRefs);
}

TEST_P(EngineTest, FreshDictPathMemo) {
  // q.fresh['k'].v with a fresh dict per call whose item alternates between
  // two objects: the dict memo of a path's read must never answer for a
  // dead dict (a new dict at the same address).
  exec("class BrkQ6:\n"
       "    n = 0\n"
       "    @property\n"
       "    def fresh(self):\n"
       "        BrkQ6.n += 1\n"
       "        o = BrkLeaf6(); o.v = BrkQ6.n % 2\n"
       "        return {'k': o}\n"
       "class BrkLeaf6: pass\n"
       "brk_q6 = BrkQ6()\n");
  Ref One = eval("1");
  SetBuilder SB;
  ValueId D = SB.keyed(AccessorKind::GetAttr, SB.local("q"), "fresh");
  SB.guard(GuardKind::EqualsMatch,
           {SB.keyed(AccessorKind::GetAttr,
                     SB.keyed(AccessorKind::DictGetItem, D, "k"), "v")},
           SB.object(One.get(), ObjectKind::Constant, true));
  BUILD(SB);
  Ref L = eval("{'q': brk_q6}");
  for (int I = 0; I < 40; ++I) {
    exec("BrkQ6.n = 0");
    bool Interp = interpret(*BS, L.get()); // n = 1: v = 1
    exec("BrkQ6.n = 0");
    EXPECT_EQ(Fn(L.get()) == 1, Interp);
    EXPECT_TRUE(Interp);
    exec("BrkQ6.n = 1");
    Interp = interpret(*BS, L.get()); // n = 2: v = 0
    exec("BrkQ6.n = 1");
    EXPECT_EQ(Fn(L.get()) == 1, Interp);
    EXPECT_FALSE(Interp);
  }
}

TEST_P(EngineTest, HugeItemIndices) {
  Ref One = eval("1");
  for (int64_t Index : {int64_t(1) << 31, int64_t(1) << 32, int64_t(1) << 40,
                        int64_t(1) << 62, INT64_MAX, INT64_MIN, int64_t(-3)})
    for (AccessorKind AK :
         {AccessorKind::TupleGetItem, AccessorKind::ListGetItem}) {
      SCOPED_TRACE(std::to_string(Index));
      SetBuilder SB;
      SB.guard(GuardKind::EqualsMatch, {SB.indexed(AK, SB.local("x"), Index)},
               SB.object(One.get(), ObjectKind::Constant, true));
      BUILD(SB);
      EXPECT_FALSE(both(*BS, Fn, eval("{'x': (1, 1, 1)}").get()));
      EXPECT_FALSE(both(*BS, Fn, eval("{'x': [1, 1, 1]}").get()));
    }
}


TEST_P(EngineTest, PathErrorsAreCleared) {
  // Errors on a path: a middle read raising a non-AttributeError, a fused
  // EQUALS_MATCH whose __eq__ raises in the middle of a path, __del__ and a
  // weakref callback of a held reference raising when the path ends.
  exec("import weakref\n"
       "class BrkCfg7:\n"
       "    mode = ''\n"
       "class BrkEq7:\n"
       "    def __eq__(self, o):\n"
       "        if BrkCfg7.mode == 'eq': raise ValueError('eq')\n"
       "        return True\n"
       "    __hash__ = object.__hash__\n"
       "    @property\n"
       "    def x(self):\n"
       "        if BrkCfg7.mode == 'x': raise RuntimeError('x')\n"
       "        return BrkDel7()\n"
       "brk_cbs7 = []\n"
       "def brk_cb7(w): raise KeyError('cb')\n"
       "class BrkDel7:\n"
       "    def __init__(self):\n"
       "        self.v = 1\n"
       "        brk_cbs7.append(weakref.ref(self, brk_cb7))\n"
       "    def __del__(self): raise OSError('del')\n"
       "class BrkQ7:\n"
       "    @property\n"
       "    def e(self): return BrkEq7()\n"
       "brk_q7 = BrkQ7()\n"
       "brk_c7 = BrkEq7()\n"
       "import sys\n"
       "brk_unraisable7 = []\n"
       "sys.unraisablehook = lambda u: brk_unraisable7.append(u.exc_type)\n");
  Ref One = eval("1"), C = eval("brk_c7");
  SetBuilder SB;
  ValueId E = SB.keyed(AccessorKind::GetAttr, SB.local("q"), "e");
  SB.guard(GuardKind::EqualsMatch, {E},
           SB.object(C.get(), ObjectKind::Constant, true));
  SB.guard(GuardKind::EqualsMatch,
           {SB.keyed(AccessorKind::GetAttr,
                     SB.keyed(AccessorKind::GetAttr, E, "x"), "v")},
           SB.object(One.get(), ObjectKind::Constant, true));
  SB.guard(GuardKind::NotNone, {SB.local("r")});
  BUILD(SB);
  Ref L = eval("{'q': brk_q7, 'r': 1}");
  for (const char *Mode : {"", "eq", "x", ""}) {
    SCOPED_TRACE(Mode);
    exec((std::string("BrkCfg7.mode = '") + Mode + "'").c_str());
    EXPECT_EQ(both(*BS, Fn, L.get()), *Mode == 0);
  }
  exec("sys.unraisablehook = sys.__unraisablehook__");
}


TEST_P(EngineTest, PersistentChainRefcountsAtEveryFailure) {
  // A persistent chain L['q'].n.n...n.v (every node lives on): a fused
  // TYPE_MATCH on each intermediate fails at each depth in turn (the node's
  // __class__ swapped); every node's refcount must be back after each call.
  exec("class BrkN8: pass\n"
       "class BrkN8b(BrkN8): pass\n"
       "brk_nodes8 = [BrkN8() for _ in range(12)]\n"
       "for a, b in zip(brk_nodes8, brk_nodes8[1:]): a.n = b\n"
       "for x in brk_nodes8: x.v = 1\n");
  Ref One = eval("1"), T = eval("BrkN8"), Nodes = eval("brk_nodes8");
  for (int K : {3, 8, 9, 11}) {
    SCOPED_TRACE(K);
    SetBuilder SB;
    ObjectId TN = SB.object(T.get(), ObjectKind::Type);
    ValueId V = SB.local("q");
    for (int I = 0; I < K; ++I) {
      V = SB.keyed(AccessorKind::GetAttr, V, "n");
      SB.guard(GuardKind::TypeMatch, {V}, TN);
    }
    SB.guard(GuardKind::EqualsMatch, {SB.keyed(AccessorKind::GetAttr, V, "v")},
             SB.object(One.get(), ObjectKind::Constant, true));
    BUILD(SB);
    Ref L = eval("{'q': brk_nodes8[0]}");
    std::vector<Py_ssize_t> Refs;
    for (Py_ssize_t I = 0; I < PyList_GET_SIZE(Nodes.get()); ++I)
      Refs.push_back(Py_REFCNT(PyList_GET_ITEM(Nodes.get(), I)));
    for (int F = 0; F <= K + 1; ++F) {
      // F in 1..K: node F's type is wrong; K+1: the last .v is wrong.
      std::string Setup =
          "for i, x in enumerate(brk_nodes8):\n"
          "    x.__class__ = BrkN8b if i == " + std::to_string(F) +
          " else BrkN8\n"
          "    x.v = 2 if i == " + std::to_string(K) + " and " +
          std::to_string(F) + " == " + std::to_string(K + 1) + " else 1\n";
      exec(Setup.c_str());
      for (int R = 0; R < 3; ++R)
        EXPECT_EQ(both(*BS, Fn, L.get()), F == 0) << F;
      for (Py_ssize_t I = 0; I < PyList_GET_SIZE(Nodes.get()); ++I)
        EXPECT_EQ(Py_REFCNT(PyList_GET_ITEM(Nodes.get(), I)), Refs[I])
            << "node " << I << " fail at " << F;
    }
  }
}


TEST_P(EngineTest, PathSideEffectsOnParentAndLocals) {
  // A property read on a path mutates its parent object, the frame locals
  // (the dict of the run from the root) and a dict read later in the run.
  exec("class BrkCfg9:\n"
       "    mode = ''\n"
       "class BrkR9:\n"
       "    def __init__(self, v): self.v = v\n"
       "class BrkA9:\n"
       "    x = 1\n"
       "brk_L9 = {}\n"
       "class BrkQ9:\n"
       "    def __init__(self):\n"
       "        self.b = 1; self.d = {'j': 1}\n"
       "    @property\n"
       "    def a(self):\n"
       "        m = BrkCfg9.mode\n"
       "        if m == 'replace_r': brk_L9['r'] = BrkR9(2)\n"
       "        elif m == 'same_r': brk_L9['r'] = BrkR9(1)\n"
       "        elif m == 'del_r': del brk_L9['r']\n"
       "        elif m == 'setattr': self.b = 5\n"
       "        elif m == 'delattr': del self.b\n"
       "        elif m == 'dict': self.d['j'] = 2\n"
       "        elif m == 'dict_same': self.d['j'] = 1; self.d['z'] = 0\n"
       "        elif m == 'newdict': self.d = {'j': 1}\n"
       "        elif m == 'locals_grow':\n"
       "            for i in range(50): brk_L9['pad%d' % i] = i\n"
       "        return BrkA9()\n");
  Ref One = eval("1");
  SetBuilder SB;
  ObjectId C1 = SB.object(One.get(), ObjectKind::Constant, true);
  ValueId Q = SB.local("q");
  SB.guard(GuardKind::EqualsMatch,
           {SB.keyed(AccessorKind::GetAttr,
                     SB.keyed(AccessorKind::GetAttr, Q, "a"), "x")},
           C1);
  SB.guard(GuardKind::EqualsMatch, {SB.keyed(AccessorKind::GetAttr, Q, "b")},
           C1);
  SB.guard(GuardKind::EqualsMatch,
           {SB.keyed(AccessorKind::DictGetItem,
                     SB.keyed(AccessorKind::GetAttr, Q, "d"), "j")},
           C1);
  SB.guard(GuardKind::EqualsMatch,
           {SB.keyed(AccessorKind::GetAttr, SB.local("r"), "v")}, C1);
  BUILD(SB);
  Ref L = eval("brk_L9");
  for (int Round = 0; Round < 3; ++Round)
    for (const char *Mode :
         {"", "replace_r", "same_r", "del_r", "setattr", "delattr", "dict",
          "dict_same", "newdict", "locals_grow", ""}) {
      SCOPED_TRACE(Mode);
      std::string Reset = std::string("BrkCfg9.mode = '") + Mode +
                          "'; brk_L9.clear(); brk_L9['q'] = brk_q9 = "
                          "BrkQ9(); brk_L9['r'] = BrkR9(1)";
      bothReset(*BS, Fn, L.get(), Reset.c_str());
    }
}

} // namespace
