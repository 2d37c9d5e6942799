"""Tests for the first tier's read paths (gj_rt_read_run with
ReadDescriptor::Path), tuple/list items through descriptors and the
relocatable memo base: cross-process object-cache agreement on a set full
of paths, tuple/list items, DICT_CONTAINS slots interleaved with value slots
and module getattr memos, and refcount / weakref hygiene through _core.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, sys, os, gc, weakref
    from guardjit import _core

    level = sys.argv[1]
    keep = []

    class Node:
        def __init__(self, v):
            self.v = v

    def build_world():
        r = Node(0)
        cur = r
        for i, name in enumerate("abcdefghijklmnop"):
            nxt = Node(i + 1)
            setattr(cur, name, nxt)
            cur = nxt
        r.t = (Node(7), None, 3, True)
        r.l = [1, (2, [3, "x"])]
        r.d = {"k": Node(9), "j": 1}
        return r

    r0 = build_world()
    s = _core.GuardSet("read_paths")

    def obj(kind, x, rep=None):
        keep.append(x)
        return s.add_object(kind, x, True, rep or repr(x))

    def key(k):
        return obj("key", k)

    def const(c):
        return obj("constant", c)

    int_t = obj("type", int, "int")
    node_t = obj("type", Node, "Node")
    lr = s.add_value("frame_local", 0, "L['r']", name="r", key=key("r"))
    lm = s.add_value("frame_local", 0, "L['m']", name="m", key=key("m"))

    def getattr_v(parent, name, src):
        return s.add_value("getattr", parent, src + "." + name, name=name,
                           key=key(name))

    # Chains of 1..16 attributes from L['r'], ending in .v == depth.
    for depth in (1, 2, 6, 7, 8, 9, 16):
        v, src = lr, "L['r']"
        for name in "abcdefghijklmnop"[:depth]:
            v = getattr_v(v, name, src)
            src += "." + name
        leaf = getattr_v(v, "v", src)
        s.add_guard("equals_match", [leaf], object=const(depth))
    # Tuple items: a path through an item, dead items with fused guards.
    t = getattr_v(lr, "t", "L['r']")
    t0 = s.add_value("tuple_get_item", t, "t[0]", index=0)
    s.add_guard("type_match", [t0], object=node_t)
    s.add_guard("equals_match", [getattr_v(t0, "v", "t[0]")], object=const(7))
    t1 = s.add_value("tuple_get_item", t, "t[1]", index=1)
    s.add_guard("none_match", [t1])
    t2 = s.add_value("tuple_get_item", t, "t[2]", index=2)
    s.add_guard("type_match", [t2], object=int_t)
    s.add_guard("equals_match", [t2], object=const(3))
    t3 = s.add_value("tuple_get_item", t, "t[3]", index=3)
    s.add_guard("true_match", [t3])
    # Nested list/tuple items: L['r'].l[1][1][0] == 3, l[1][1][1] not None.
    l = getattr_v(lr, "l", "L['r']")
    l1 = s.add_value("list_get_item", l, "l[1]", index=1)
    l11 = s.add_value("tuple_get_item", l1, "l[1][1]", index=1)
    l110 = s.add_value("list_get_item", l11, "l[1][1][0]", index=0)
    s.add_guard("equals_match", [l110], object=const(3))
    l111 = s.add_value("list_get_item", l11, "l[1][1][1]", index=1)
    s.add_guard("not_none", [l111])
    # A dict with DICT_CONTAINS slots between value slots, and a path
    # through one of its items.
    d = getattr_v(lr, "d", "L['r']")
    s.add_guard("dict_contains", [d], object=key("k"), int=1)
    s.add_guard("dict_contains", [d], object=key("zz"), int=0)
    dk = s.add_value("dict_get_item", d, "d['k']", key=key("k"))
    s.add_guard("equals_match", [getattr_v(dk, "v", "d['k']")], object=const(9))
    dj = s.add_value("dict_get_item", d, "d['j']", key=key("j"))
    s.add_guard("equals_match", [dj], object=const(1))
    # A module read path: L['m'].path.sep == os.sep.
    mp = getattr_v(lm, "path", "L['m']")
    s.add_guard("equals_match", [getattr_v(mp, "sep", "L['m'].path")],
                object=const(os.sep))

    bound = _core.bind(s)
    compiled = _core.compile(bound, level)
    native = _core.make_guard(bound, compiled)
    interp = _core.make_guard(bound, None)

    def variants():
        yield "good", build_world()
        for depth in (1, 2, 6, 7, 8, 9, 16):
            w = build_world()
            cur = w
            for name in "abcdefghijklmnop"[:depth]:
                cur = getattr(cur, name)
            cur.v = -1
            yield f"leaf{depth}", w
        for i, name in enumerate("abcdefghijklmnop"):
            w = build_world()
            cur = w
            for n2 in "abcdefghijklmnop"[:i]:
                cur = getattr(cur, n2)
            delattr(cur, name)
            yield f"cut{i}", w
        w = build_world(); w.t = (Node(7), None, 3); yield "tshort", w
        w = build_world(); w.t = [Node(7), None, 3, True]; yield "tlist", w
        class TS(tuple):
            def __getitem__(self, i): return None
        w = build_world(); w.t = TS((Node(7), None, 3, True)); yield "tsub", w
        w = build_world(); w.t = (Node(8), None, 3, True); yield "t0v", w
        w = build_world(); w.t = (Node(7), 0, 3, True); yield "t1", w
        w = build_world(); w.t = (Node(7), None, 3.0, True); yield "t2", w
        w = build_world(); w.t = (Node(7), None, 3, 1); yield "t3", w
        w = build_world(); w.l = [1, (2, [4, "x"])]; yield "l110", w
        w = build_world(); w.l = [1, (2, [3, None])]; yield "l111", w
        w = build_world(); w.l = [1, [2, [3, "x"]]]; yield "l1list", w
        w = build_world(); w.l = (1, (2, [3, "x"])); yield "ltuple", w
        w = build_world(); w.d = {"k": Node(9)}; yield "dnoj", w
        w = build_world(); w.d = {"k": Node(9), "j": 1, "zz": 0}; yield "dzz", w
        w = build_world(); w.d = {"j": 1}; yield "dnok", w
        w = build_world(); w.d = {"k": Node(10), "j": 1}; yield "dkv", w

    answers = []
    for _ in range(3):  # later rounds run on filled memos
        for name, w in variants():
            for m in (os, sys):
                f_locals = {"r": w, "m": m}
                a, b = bool(native(f_locals)), bool(interp(f_locals))
                answers.append([name, m.__name__, a, b])
    gc.collect()
    print(json.dumps({
        "answers": answers,
        "cache": _core.object_cache_stats(),
    }))
    """
)


def _run(cache_dir, level):
    env = dict(os.environ, GUARDJIT_CACHE_DIR=cache_dir)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, level],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _check(out):
    bad = [a for a in out["answers"] if a[2] != a[3]]
    assert not bad, bad[:10]
    good = [a for a in out["answers"] if a[0] == "good" and a[1] == "os"]
    assert good and all(a[2] for a in good), good
    assert any(not a[2] for a in out["answers"])


def test_second_process_hits_and_agrees_on_paths(tmp_path):
    for level in ("O0", "light", "O1"):
        d = str(tmp_path / level)
        os.makedirs(d)
        first = _run(d, level)
        _check(first)
        second = _run(d, level)
        _check(second)
        hits = sum(v.get("hits", 0) for v in second["cache"].values())
        assert hits >= 1, (level, second["cache"])


UAF_CHILD = textwrap.dedent(
    """
    # O0 read run: a path's new reference (`q.fresh`) dies inside
    # gj_rt_read_run when its path ends; its __del__ frees the run's
    # borrowed parent `q` (the frame locals held the only reference); the
    # next step of the same run (`q.v`) reads the freed `q`.
    import sys
    from guardjit import _core

    level = sys.argv[1]
    L = {}

    class Fresh:
        def __init__(self): self.x = 1
        def __del__(self): L.pop("q", None)

    class Q:
        def __init__(self): self.v = 1
        @property
        def fresh(self): return Fresh()

    s = _core.GuardSet("uaf")
    keep = []
    def obj(kind, x):
        keep.append(x); return s.add_object(kind, x, True, repr(x))
    one = obj("constant", 1)
    lq = s.add_value("frame_local", 0, "L['q']", name="q", key=obj("key", "q"))
    fr = s.add_value("getattr", lq, "L['q'].fresh", name="fresh",
                     key=obj("key", "fresh"))
    x = s.add_value("getattr", fr, "L['q'].fresh.x", name="x",
                    key=obj("key", "x"))
    s.add_guard("equals_match", [x], object=one)
    v = s.add_value("getattr", lq, "L['q'].v", name="v", key=obj("key", "v"))
    s.add_guard("equals_match", [v], object=one)
    bound = _core.bind(s)
    native = _core.make_guard(bound, _core.compile(bound, level))
    interp = _core.make_guard(bound, None)
    L["q"] = Q(); a = bool(interp(L))
    L["q"] = Q(); b = bool(native(L))
    print(a, b)
    """
)


def test_path_end_must_not_free_the_run_parent():
    # Every level holds `q.fresh` to the end of the check, as the
    # interpreter does (O0 once released it when its path ended: a segfault
    # under PYTHONMALLOC=debug, a wrong answer or a silent use after free
    # without it).
    for level in ("light", "O1", "O0"):
        env = dict(os.environ, PYTHONMALLOC="debug")
        r = subprocess.run([sys.executable, "-c", UAF_CHILD, level],
                           capture_output=True, text=True, timeout=120,
                           env=env)
        assert r.returncode == 0, (level, r.returncode, r.stderr[-2000:])
        assert r.stdout.split() == ["True", "True"], (level, r.stdout)


E2E = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                   "read_path_e2e_cases.py")


def _e2e(guardjit, cache_dir=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GUARDJIT", "GUARDJIT_CACHE_DIR", "PYTHONMALLOC")}
    if guardjit:
        env.update(GUARDJIT="1", GUARDJIT_FIRST_TIER="sync",
                   GUARDJIT_TIER_UP="off", GUARDJIT_OPT="O0")
    if cache_dir:
        env["GUARDJIT_CACHE_DIR"] = cache_dir
    r = subprocess.run([sys.executable, E2E], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_e2e_paths_and_items_match_plain_torch(tmp_path):
    plain = _e2e(False)
    for s in plain["steps"]:
        assert s[0] == s[1], s
    first = _e2e(True, str(tmp_path))
    second = _e2e(True, str(tmp_path))  # object cache hit
    assert [s[:2] for s in first["steps"]] == [s[:2] for s in plain["steps"]]
    assert [s[:2] for s in second["steps"]] == [s[:2] for s in plain["steps"]]
    # same recompiles as plain torch
    assert [s[2] for s in first["steps"]] == [s[2] for s in plain["steps"]]
    assert [s[2] for s in second["steps"]] == [s[2] for s in plain["steps"]]


SAME_IR_CHILD = 'import sys, gc, os\nfrom guardjit import _core\nlevel = sys.argv[1]\n\nclass Node: pass\nclass Tok:\n    def __repr__(self): return "Tok()"\n\ndef make(tok, keep):\n    s = _core.GuardSet("same_ir")\n    def obj(kind, x):\n        keep.append(x); return s.add_object(kind, x, True, repr(x))\n    lq = s.add_value("frame_local", 0, "L[\'q\']", name="q", key=obj("key", "q"))\n    a = s.add_value("getattr", lq, "L[\'q\'].a", name="a", key=obj("key", "a"))\n    b = s.add_value("getattr", a, "L[\'q\'].a.b", name="b", key=obj("key", "b"))\n    t = s.add_value("tuple_get_item", b, "L[\'q\'].a.b[0]", index=0)\n    s.add_guard("id_match", [t], object=obj("object", tok))\n    d = s.add_value("getattr", lq, "L[\'q\'].d", name="d", key=obj("key", "d"))\n    dk = s.add_value("dict_get_item", d, "L[\'q\'].d[\'k\']", key=obj("key", "k"))\n    s.add_guard("id_match", [dk], object=obj("object", tok))\n    s.add_guard("dict_contains", [d], object=obj("key", "k"), int=1)\n    return s\n\ndef world(tok):\n    q = Node(); q.a = Node(); q.a.b = (tok,); q.d = {"k": tok}; return q\n\nta, tb = Tok(), Tok()\nka, kb = [], []\nsa, sb = make(ta, ka), make(tb, kb)\nba, bb = _core.bind(sa), _core.bind(sb)\nca = _core.compile(ba, level)\ncb = _core.compile(bb, level)\nna, nb = _core.make_guard(ba, ca), _core.make_guard(bb, cb)\nia, ib = _core.make_guard(ba, None), _core.make_guard(bb, None)\nres = []\nfor _ in range(3):\n    for tok in (ta, tb):\n        L = {"q": world(tok)}\n        res.append((bool(na(L)), bool(ia(L)), bool(nb(L)), bool(ib(L))))\ndel na, ia, ca, ba, sa, ka\ngc.collect()\njunk = [bytearray(200) for _ in range(10000)]\nfor _ in range(3):\n    for tok in (ta, tb):\n        L = {"q": world(tok)}\n        res.append((None, None, bool(nb(L)), bool(ib(L))))\nbad = [r for r in res if r[0] != r[1] or r[2] != r[3]]\nprint(level, "bad:", bad, _core.object_cache_stats())\n'


def test_same_ir_twice_in_one_process_uses_each_sets_memos(tmp_path):
    # Two sets of one IR over different objects: the second compile hits
    # the first's cached object, and must address its own memo array (the
    # relocatable gj.memos base), also after the first set is freed.
    for level in ("O0", "O0", "O1"):
        env = dict(os.environ, GUARDJIT_CACHE_DIR=str(tmp_path),
                   PYTHONMALLOC="debug")
        r = subprocess.run([sys.executable, "-c", SAME_IR_CHILD, level],
                           capture_output=True, text=True, timeout=300,
                           env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "bad: []" in r.stdout, r.stdout
        assert "'hits': 0" not in r.stdout, r.stdout
