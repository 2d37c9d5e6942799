"""Run in a child process by test_read_paths.py: nested attribute
chains (read paths at O0), tuple/list items (descriptor reads with fused
guards) and EQUALS_MATCH constants through torch.compile(backend="eager"),
mutated along the way; prints one JSON line of outcomes. Started with
GUARDJIT=1 (O0 kept: GUARDJIT_FIRST_TIER=sync, GUARDJIT_TIER_UP=off) or
without (plain torch)."""

import json
import sys

import torch
import torch._dynamo
from torch._dynamo.utils import counters


class Node:
    pass


def chain(depth, leaf):
    root = Node()
    cur = root
    for i in range(depth):
        nxt = Node()
        setattr(cur, "c%d" % i, nxt)
        cur = nxt
    cur.leaf = leaf
    return root


def rebuild(root, at, depth=9):
    """Replaces the nodes below depth `at` with fresh ones (same shape)."""
    parent = deep_get(root, at)
    old = getattr(parent, "c%d" % at)
    new = Node()
    new.__dict__.update(old.__dict__)
    setattr(parent, "c%d" % at, new)
    if at + 1 < depth:
        rebuild(root, at + 1, depth)


def deep_get(root, depth):
    cur = root
    for i in range(depth):
        cur = getattr(cur, "c%d" % i)
    return cur


class TSub(tuple):
    def __getitem__(self, i):
        return 100


class LSub(list):
    def __getitem__(self, i):
        return 100


def f(x, cfg, tup, lst):
    y = x * cfg.c0.c1.c2.c3.c4.c5.c6.c7.c8.leaf
    y = y + cfg.c0.c1.c2.leaf2
    if tup[1] is None:
        y = y + tup[0]
    if tup[2] == "mode":
        y = y * 2
    if lst[0][1] is True:
        y = y - lst[1]
    return y


def main():
    X = torch.arange(4.0)
    opt = torch.compile(f, backend="eager")
    out = []

    def step(cfg, tup, lst):
        try:
            e = f(X, cfg, tup, lst).tolist()
        except Exception as ex:  # noqa: BLE001
            e = type(ex).__name__
        try:
            c = opt(X, cfg, tup, lst).tolist()
        except Exception as ex:  # noqa: BLE001
            c = type(ex).__name__
        out.append([e, c, counters["frames"]["ok"]])

    cfg = chain(9, 2.0)
    deep_get(cfg, 3).leaf2 = 1.0
    tup = (3, None, "mode")
    lst = [(0, True), 5]
    step(cfg, tup, lst)
    step(cfg, tup, lst)
    deep_get(cfg, 9).leaf = 3.0
    step(cfg, tup, lst)
    rebuild(cfg, 5)  # fresh nodes below depth 5, same values
    step(cfg, tup, lst)
    deep_get(cfg, 9).leaf = 4.0
    step(cfg, tup, lst)
    delattr(deep_get(cfg, 7), "c7")
    step(cfg, tup, lst)
    cfg = chain(9, 4.0)
    deep_get(cfg, 3).leaf2 = 1.0
    step(cfg, tup, lst)
    deep_get(cfg, 3).leaf2 = 7.0
    step(cfg, tup, lst)
    step(cfg, (4, None, "mode"), lst)
    step(cfg, (3, 0, "mode"), lst)
    step(cfg, (3, None, "other"), lst)
    step(cfg, TSub((3, None, "mode")), lst)
    step(cfg, tup, [(0, False), 5])
    step(cfg, tup, [[0, True], 5])
    step(cfg, tup, LSub([(0, True), 5]))
    step(cfg, tup, [(0, True), 6])
    lst[0] = (0, 1)
    step(cfg, tup, lst)
    lst[0] = (0, True)
    step(cfg, tup, lst)
    step(cfg, tup, lst)
    try:
        import guardjit
        gstats = guardjit.stats()
        native = {k: gstats.get(k) for k in ("units_native", "units_interpreter", "units_dynamo", "tier_up")}
    except Exception:  # noqa: BLE001
        native = None
    print(json.dumps({"steps": out, "guardjit": native}, default=str))


if __name__ == "__main__":
    main()
