"""guardjit.lab.routing judges which cache entry serves a call under the stance.

In-process, plain torch (these tests never install guardjit): torch 2.13
routes the issue's cache-line pickup correctly; the checker must say so, and
must say "misrouted" when the differentiating roots are emptied by hand (so
its "ok" is not vacuous).
"""

from __future__ import annotations

import torch
from torch._C._dynamo.guards import RootGuardManager

from guardjit.lab import routing


def pickup(x, a=None, b=None):
    x = x * 3
    if a:
        x = x * 5
    if b:
        x = x * 7
    return x


def _warm() -> tuple[routing.TaggingBackend, list[routing.Input]]:
    tag = routing.TaggingBackend()
    opt = torch.compile(pickup, backend=tag)
    x = torch.ones(4)
    ins = [routing.Input(f"a={a},b={b}", (lambda a=a, b=b: opt(x, a=a, b=b)),
                         (lambda a=a, b=b: pickup(x, a=a, b=b)))
           for a, b in ((None, None), (1, None), (1, 1))]
    for i in ins:
        i.compiled()
    return tag, ins


def test_orders():
    assert len(routing.orders(3)) == 6
    assert len(set(routing.orders(4))) == 24
    many = routing.orders(6, count=12, seed=1)
    assert len(many) == 12 and many[0] == tuple(range(6))
    assert all(sorted(o) == list(range(6)) for o in many)
    assert many == routing.orders(6, count=12, seed=1)  # seeded: the same orders every run


def test_tagging_backend_and_frame_locals():
    tag, ins = _warm()
    assert tag.compiled == ["0/0", "0/1", "0/2"]
    assert all(c is pickup.__code__ for c in tag.codes.values())
    ins[1].prepare(pickup.__code__)
    assert set(ins[1].f_locals) == {"x", "a", "b"} and ins[1].f_locals["a"] == 1
    # Front first: the newest entry; a full lookup picks the entry compiled for the input.
    ents = routing.entries(pickup.__code__)
    assert [routing.entry_id(e) for e in ents] == ["0/2", "0/1", "0/0"]
    assert routing.full_pick(ents, ins[1].f_locals) == ("0/1", [])


def _fail_counts() -> dict[str, int]:
    def walk(m):
        return m.fail_count() + sum(walk(c) for c in m.get_child_managers())
    return {routing.entry_id(e): walk(e.guard_manager.root)
            for e in routing.entries(pickup.__code__)}


def test_torch_routes_the_cache_line_pickup():
    tag, ins = _warm()
    before = _fail_counts()
    rep = routing.check_routing(pickup.__code__, ins, tag, routing.orders(3))
    assert rep.ok, rep.as_dict()
    # The oracle checks clones: torch's trees keep the fail counts its next
    # compile would read (under the stance, no call runs them either).
    assert _fail_counts() == before
    assert len(rep.calls) == 18 and rep.recompiles == 0
    # Every hit moved its entry to the front: the replay reached several cache orders.
    assert len({tuple(c.cache_order) for c in rep.calls}) > 1
    assert routing.check_routing(pickup.__code__, ins, tag, routing.orders(3), stance=False).ok


def test_empty_differentiating_roots_are_misrouted():
    tag, ins = _warm()
    for e in routing.entries(pickup.__code__):
        gm = e.guard_manager
        gm.diff_guard_root = RootGuardManager()  # passes everything
        gm.cache_entry.update_diff_guard_root_manager()
        assert routing.diff_root_guards(gm) == 0
    rep = routing.check_routing(pickup.__code__, ins, tag, routing.orders(3))
    assert not rep.ok
    d = rep.as_dict()
    # The front entry serves every input: wrong whenever the input is another's.
    assert d["wrong_entry"] == d["misrouted_calls"] > 0
    assert d["wrong_result"] == d["misrouted_calls"]
    bad = rep.misroutes[0]
    assert bad.served == [bad.cache_order[0]] != [bad.expected]
    # Without the stance the full lookup runs: the oracle still holds.
    assert routing.check_routing(pickup.__code__, ins, tag, routing.orders(3), stance=False).ok


def test_a_stance_miss_is_not_routed():
    tag = routing.TaggingBackend()
    opt = torch.compile(pickup, backend=tag)
    x = torch.ones(4)
    opt(x)
    unwarmed = routing.Input("a=1", lambda: opt(x, a=1), lambda: pickup(x, a=1))
    rep = routing.check_routing(pickup.__code__, [unwarmed], tag, [(0,)])
    # torch's seed keeps x's tensor guard only; a=1 reaches the a=None entry: it
    # passes the differentiating root, and the full lookup picks no entry.
    assert not rep.ok and rep.calls[0].expected is None
