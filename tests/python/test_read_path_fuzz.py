"""Fuzz of the first tier's read paths: random object trees read through random guard sets built
with _core (getattr, get_item, tuple/list items, dict get item / key /
value, __code__, type), ids laid out depth first or breadth first so that
read paths, runs and neither all occur, with fusible guards (type, id,
none, true, not_none, equals) and unfusible ones (length_check,
dict_length, dict_contains) that break paths; random mutations of the
world. Native O0 / light / O1 must answer as the interpreter on every
variant, several rounds (filled memos), with no error left set and no
reference leaked on the world's objects. Plain, side-effect-free objects:
a disagreement is a logic bug of readPaths / the run grouping / the
descriptor layout, not a lifetime question."""

from __future__ import annotations

import copy
import gc
import random
import sys

from guardjit import _core


class Node:
    pass


def fn_a():
    pass


def fn_b():
    pass


def rand_leaf(r):
    return r.choice([0, 1, 7, None, True, False, "s", "t", 2.5, fn_a, fn_b,
                     10**30])


def rand_world(r, depth):
    if depth == 0 or r.random() < 0.2:
        return rand_leaf(r)
    kind = r.choice(["node", "node", "tuple", "list", "dict"])
    n = r.randint(1, 3)
    if kind == "node":
        o = Node()
        for i in range(n):
            setattr(o, "a%d" % i, rand_world(r, depth - 1))
        return o
    items = [rand_world(r, depth - 1) for _ in range(n)]
    if kind == "tuple":
        return tuple(items)
    if kind == "list":
        return items
    return {"k%d" % i: v for i, v in enumerate(items)}


class Builder:
    def __init__(self, r):
        self.r = r
        self.s = _core.GuardSet("fuzz")
        self.keep = []
        self.nguards = 0

    def obj(self, kind, x):
        self.keep.append(x)
        return self.s.add_object(kind, x, True, repr(x)[:40])

    def value(self, kind, parent, src, **kw):
        return self.s.add_value(kind, parent, src, **kw)

    def guards(self, vid, x):
        r = self.r
        s = self.s
        if r.random() < 0.4:
            s.add_guard("type_match", [vid], object=self.obj("type", type(x)))
        if x is None and r.random() < 0.5:
            s.add_guard("none_match", [vid])
        if x is True and r.random() < 0.5:
            s.add_guard("true_match", [vid])
        if x is not None and r.random() < 0.2:
            s.add_guard("not_none", [vid])
        if isinstance(x, (int, str, float)) and r.random() < 0.5:
            s.add_guard("equals_match", [vid], object=self.obj("constant", x))
        if (x in (fn_a, fn_b) or isinstance(x, type)) and r.random() < 0.5:
            s.add_guard("id_match", [vid], object=self.obj("object", x))
        if isinstance(x, (tuple, list)) and r.random() < 0.15:
            s.add_guard("length_check", [vid], int=len(x))
        if isinstance(x, dict) and r.random() < 0.15:
            s.add_guard("dict_length", [vid], int=len(x))
        if isinstance(x, dict) and x and r.random() < 0.15:
            k = self.r.choice(list(x))
            s.add_guard("dict_contains", [vid], object=self.obj("key", k),
                        int=1)

    def children(self, x):
        """(kind, kwargs, child object) for reads of x."""
        r = self.r
        out = []
        if isinstance(x, Node):
            for name, v in vars(x).items():
                if r.random() < 0.8:
                    out.append(("getattr", dict(name=name,
                                                key=self.obj("key", name)), v))
        elif isinstance(x, tuple):
            for i, v in enumerate(x):
                if r.random() < 0.8:
                    out.append(("tuple_get_item", dict(index=i), v))
        elif isinstance(x, list):
            for i, v in enumerate(x):
                if r.random() < 0.8:
                    out.append(("list_get_item", dict(index=i), v))
        elif isinstance(x, dict):
            for i, (k, v) in enumerate(x.items()):
                c = r.random()
                if c < 0.5:
                    out.append(("dict_get_item",
                                dict(key=self.obj("key", k)), v))
                elif c < 0.65:
                    out.append(("get_item", dict(key=self.obj("key", k)), v))
                elif c < 0.75:
                    out.append(("dict_value", dict(index=i), v))
                elif c < 0.85:
                    out.append(("dict_key", dict(index=i), k))
        elif x in (fn_a, fn_b) and r.random() < 0.6:
            out.append(("code", dict(), x.__code__))
        if r.random() < 0.05:
            out.append(("type", dict(), type(x)))
        return out

    def build(self, vid, x, depth):
        kids = self.children(x)
        self.guards(vid, x)
        if self.r.random() < 0.5:  # depth first: paths get consecutive ids
            for kind, kw, v in kids:
                c = self.value(kind, vid, "v", **kw)
                self.build(c, v, depth + 1)
        else:  # breadth first for this node's children
            made = [(self.value(kind, vid, "v", **kw), v)
                    for kind, kw, v in kids]
            for c, v in made:
                self.build(c, v, depth + 1)


def mutate(r, world):
    """A deep copy of world with one random change somewhere."""
    w = copy.deepcopy(world)
    holders = []

    def walk(x, depth):
        if isinstance(x, Node):
            for k in list(vars(x)):
                holders.append((x, k))
                walk(getattr(x, k), depth + 1)
        elif isinstance(x, list):
            for i, v in enumerate(x):
                holders.append((x, i))
                walk(v, depth + 1)
        elif isinstance(x, dict):
            for k, v in x.items():
                holders.append((x, k))
                walk(v, depth + 1)
        elif isinstance(x, tuple):
            for v in x:
                walk(v, depth + 1)

    walk(w, 0)
    if not holders:
        return rand_leaf(r)
    h, k = r.choice(holders)
    old = h[k] if not isinstance(h, Node) else getattr(h, k)
    choice = r.random()
    if choice < 0.3:
        new = rand_leaf(r)
    elif choice < 0.45 and isinstance(old, tuple):
        new = list(old)
    elif choice < 0.55 and isinstance(old, list):
        new = tuple(old)
    elif choice < 0.65 and isinstance(old, (tuple, list)):
        new = type(old)(list(old)[:-1])
    elif choice < 0.75:
        if isinstance(h, Node):
            delattr(h, k)
        else:
            del h[k]
        return w
    else:
        new = rand_world(r, 2)
    if isinstance(h, Node):
        setattr(h, k, new)
    else:
        h[k] = new
    return w


def run_seed(seed, levels=("O0", "light", "O1")):
    r = random.Random(seed)
    worlds = {"a": rand_world(r, 4), "b": rand_world(r, 3)}
    b = Builder(r)
    for name, x in worlds.items():
        vid = b.value("frame_local", 0, "L[%r]" % name, name=name,
                      key=b.obj("key", name))
        b.build(vid, x, 0)
    bound = _core.bind(b.s)
    interp = _core.make_guard(bound, None)
    natives = {lv: _core.make_guard(bound, _core.compile(bound, lv))
               for lv in levels}
    variants = [dict(worlds)]
    for _ in range(12):
        name = r.choice(["a", "b"])
        v = dict(worlds)
        v[name] = mutate(r, worlds[name])
        variants.append(v)
    variants.append({"a": worlds["a"]})
    bad = []
    for _ in range(3):
        for i, f_locals in enumerate(variants):
            want = bool(interp(f_locals))
            assert not sys.exc_info()[0]
            for lv, f in natives.items():
                got = bool(f(f_locals))
                if got != want:
                    bad.append((seed, lv, i, want, got))
    assert bool(interp(variants[0])), seed
    return bad


def test_random_path_sets_agree():
    bad = []
    for seed in range(300):
        bad += run_seed(seed)
    assert not bad, bad[:20]


def test_no_leaks_on_a_fixed_world():
    r = random.Random(1234)
    world = rand_world(r, 4)
    b = Builder(r)
    vid = b.value("frame_local", 0, "L['a']", name="a", key=b.obj("key", "a"))
    b.build(vid, world, 0)
    bound = _core.bind(b.s)
    f = _core.make_guard(bound, _core.compile(bound, "O0"))
    objs = []

    def walk(x):
        objs.append(x)
        if isinstance(x, Node):
            for v in vars(x).values():
                walk(v)
        elif isinstance(x, (tuple, list)):
            for v in x:
                walk(v)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)

    walk(world)
    L = {"a": world}
    f(L)
    gc.collect()
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(1000):
        f(L)
    after = [sys.getrefcount(o) for o in objs]
    assert before == after
