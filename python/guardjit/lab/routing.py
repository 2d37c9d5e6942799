"""Which cache entry serves a call under ``skip_guard_eval_unsafe``, against a full lookup.

Under ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)`` Dynamo's
cache lookup runs each entry's *differentiating* root instead of its full
root. A call is **routed correctly** when the entry that serves it is the one
a full-guard lookup would pick in the same cache order, and its result equals
eager's. torch 2.13's cache is LRU (a hit moves its entry to the front, under
the stance too), so the order the entries are tried in changes at run time;
this module replays warmed-up inputs in several orders and checks every call.

How each call is judged (the mirrored torch source is
``torch/csrc/dynamo/extra_state.cpp``, ``lookup``: entries front first, the
first whose guards pass serves; ``backend_match`` skips entries of other
backends):

1. *expected*: before the call, the checker walks
   ``torch._dynamo.eval_frame._debug_get_cache_entry_list(code)`` front first
   and runs every entry's **full** root on the frame locals of that call; the
   first that passes is the entry a full lookup picks. The full root is
   Dynamo's own tree (``guard_manager.dynamo_root`` when guardjit replaced
   ``guard_manager.root``, else ``guard_manager.root``), checked as a clone
   (:class:`OracleRoots`: the tree's fail counts stay untouched); where
   guardjit's installed root answers differently, the call records it.
2. *served*: the scenario compiles with a :class:`TaggingBackend`, whose
   graphs record the compile id they were compiled under when they run; the
   call must run exactly one graph.
3. *result*: the call's output equals the eager output
   (``torch.testing.assert_close``, dtype included; NaNs equal).

A call that raises (e.g. torch's ``Recompilation triggered with
skip_guard_eval_unsafe stance``) is not routed correctly.

API (used by ``python -m guardjit bench --suite diffsets`` and by tests)::

    tag = TaggingBackend()                    # backend="eager" with graph tags
    opt = torch.compile(fn, backend=tag)
    inputs = [Input("a=None", lambda: opt(x), lambda: fn(x)), ...]
    for i in inputs: i.compiled()             # the warm-up
    report = check_routing(fn.__code__, inputs, tag, orders(len(inputs)))
    assert report.ok, report.misroutes[:3]

Frame locals are captured from an eager call of the same code object
(``sys.setprofile``, first frame of ``code``), so they carry exactly the names
Dynamo's guards read (``L['self']``, ``L['x']`` ...). ``Input.setup`` runs
before each capture and each compiled call: it sets the state an input
stands for (a global, ``module.train()``).

Threads: one thread; the profile hook is process-wide while it captures.
Side effects: the calls themselves (cache order, and outside the stance,
Dynamo's fail counts on a miss); the oracle checks clones. Guard-count
helpers: :func:`count_guards`, :func:`diff_root_guards`.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

STANCE_ERROR = "Recompilation triggered with skip_guard_eval_unsafe"


class TaggingBackend:
    """``backend=`` whose graphs record which compile unit ran them.

    ``compiled`` lists the compile ids (``str(CompileId)``, e.g. ``"0/1"``) in
    compile order; ``served`` the compile ids of the graphs run since it was
    last cleared; ``codes`` the code object of the frame each compile id
    belongs to. The graph itself runs as the ``eager`` backend runs it
    (``GraphModule.forward``), so results equal the eager backend's.
    """

    def __init__(self) -> None:
        self.compiled: list[str] = []
        self.served: list[str] = []
        self.codes: dict[str, Any] = {}
        self.__name__ = "tagging_eager"

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        from torch._guards import CompileContext

        cid = str(CompileContext.current_compile_id())
        self.compiled.append(cid)
        try:
            from torch._dynamo.symbolic_convert import InstructionTranslator

            self.codes[cid] = InstructionTranslator.current_tx().f_code
        except Exception:  # noqa: BLE001 - only used to find the code object
            self.codes[cid] = None
        forward = gm.forward
        served = self.served

        def run(*args: Any) -> Any:
            served.append(cid)
            return forward(*args)

        return run


@dataclasses.dataclass
class Input:
    """One warmed-up input: how to call the compiled and the eager program.

    ``compiled`` and ``eager`` take no arguments (close over the input);
    ``setup`` puts the process in the state the input stands for.
    """

    name: str
    compiled: Callable[[], Any]
    eager: Callable[[], Any]
    setup: Callable[[], None] | None = None
    # filled by prepare(): eager output and the frame locals of ``code``
    expected: Any = None
    f_locals: dict | None = None

    def prepare(self, code: Any) -> None:
        if self.setup is not None:
            self.setup()
        self.expected, self.f_locals = capture_locals(code, self.eager)
        if self.f_locals is None:
            raise RuntimeError(f"input {self.name}: the eager call never entered {code.co_name}")


def capture_locals(code: Any, call: Callable[[], Any]) -> tuple[Any, dict | None]:
    """(``call()``, the frame locals of the first frame of ``code`` it enters).

    Containers (dict, list) are copied at entry: a frame that mutates its
    own ``kwargs`` would otherwise leave a dict its guards no longer pass on.
    """
    got: dict[str, dict] = {}

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code and "v" not in got:
            got["v"] = {k: (type(v)(v) if type(v) in (dict, list) else v)
                        for k, v in frame.f_locals.items()}

    prev = sys.getprofile()
    sys.setprofile(prof)
    try:
        out = call()
    finally:
        sys.setprofile(prev)
    return out, got.get("v")


def entries(code: Any) -> list[Any]:
    """The cache entries of ``code``, front (tried first) to back."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return list(_debug_get_cache_entry_list(code))


def entry_id(entry: Any) -> str:
    return str(entry.compile_id)


def full_root(guard_manager: Any) -> Any:
    """Dynamo's full tree of an entry (the one it built, even under guardjit)."""
    root = getattr(guard_manager, "dynamo_root", None)
    return guard_manager.root if root is None else root


class OracleRoots:
    """Per entry, a clone of Dynamo's full tree for the oracle to check.

    Checking the tree itself would raise its fail counts, which torch reads
    at the next compile of the code (``collect_diff_guard_sources``) to pick
    the sources of every differentiating root: the checker would change what
    it measures. ``clone_manager`` with an always-true filter copies every
    node and leaf guard (the epilogue lambdas too); where it returns None the
    tree itself is checked.
    """

    def __init__(self) -> None:
        self._roots: dict[int, tuple[Any, Any]] = {}  # id(guard_manager) -> (gm, root)

    def __call__(self, guard_manager: Any) -> Any:
        got = self._roots.get(id(guard_manager))
        if got is None or got[0] is not guard_manager:
            tree = full_root(guard_manager)
            clone = tree.clone_manager(lambda _node: True)
            got = (guard_manager, tree if clone is None else clone)
            self._roots[id(guard_manager)] = got
        return got[1]


def full_pick(ents: Sequence[Any], f_locals: dict,
              oracle: Callable[[Any], Any] | None = None) -> tuple[str | None, list[str]]:
    """(compile id of the first entry whose full root passes, or None;
    ids of entries whose installed root answers unlike Dynamo's tree).

    ``oracle(guard_manager)`` gives the root standing for Dynamo's tree
    (default: the tree itself; :class:`OracleRoots` clones it).
    """
    oracle = oracle or full_root
    pick, disagree = None, []
    for e in ents:
        gm = e.guard_manager
        ok = bool(oracle(gm).check(f_locals))
        if gm.root is not full_root(gm) and bool(gm.root.check(f_locals)) != ok:
            disagree.append(entry_id(e))
        if ok and pick is None:
            pick = entry_id(e)
    return pick, disagree


def same_result(a: Any, b: Any) -> bool:
    try:
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
        return True
    except (AssertionError, TypeError, ValueError):
        return False


def orders(n: int, count: int = 12, seed: int = 0) -> list[tuple[int, ...]]:
    """Every permutation of ``range(n)`` when n <= 4, else ``count`` seeded
    random ones (the identity first: the warm-up order)."""
    if n <= 4:
        return list(itertools.permutations(range(n)))
    rng = random.Random(seed)
    out = [tuple(range(n))]
    while len(out) < count:
        p = list(range(n))
        rng.shuffle(p)
        out.append(tuple(p))
    return out


@dataclasses.dataclass
class Call:
    order: int  # index into the orders
    input: str
    cache_order: list[str]  # compile ids, front first, before the call
    expected: str | None  # the entry a full lookup picks
    served: list[str]  # compile ids of the graphs the call ran
    result_ok: bool
    error: str | None = None
    root_disagrees: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.error is None and self.expected is not None
                and self.served == [self.expected] and self.result_ok)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ok"] = self.ok
        return d


@dataclasses.dataclass
class Report:
    stance: bool
    calls: list[Call]
    orders: int
    entries: int
    backends_equal: bool  # every entry's backend == the first's (the oracle ignores backends)
    recompiles: int  # compiles during the replay (a warmed input that missed)

    @property
    def ok(self) -> bool:
        return (bool(self.calls) and all(c.ok for c in self.calls) and self.backends_equal
                and self.recompiles == 0)

    @property
    def misroutes(self) -> list[Call]:
        return [c for c in self.calls if not c.ok]

    def as_dict(self, max_misroutes: int = 8) -> dict[str, Any]:
        bad = self.misroutes
        return {"ok": self.ok, "stance": self.stance, "calls": len(self.calls),
                "orders": self.orders, "entries": self.entries,
                "backends_equal": self.backends_equal, "recompiles": self.recompiles,
                "misrouted_calls": len(bad),
                "wrong_entry": sum(c.error is None and c.served != [c.expected] for c in bad),
                "wrong_result": sum(c.error is None and not c.result_ok for c in bad),
                "errors": sum(c.error is not None for c in bad),
                "root_disagreements": sum(bool(c.root_disagrees) for c in self.calls),
                "misroutes": [c.as_dict() for c in bad[:max_misroutes]]}


def _err(e: BaseException) -> str:
    msg = f"{type(e).__name__}: {e}".strip()
    return msg.splitlines()[0][:300]


def check_routing(code: Any, inputs: Sequence[Input], tag: TaggingBackend,
                  call_orders: Sequence[Sequence[int]], stance: bool = True) -> Report:
    """Replays ``inputs`` in each of ``call_orders`` (under the stance unless
    ``stance=False``, which checks the oracle itself against Dynamo's full
    lookup) and judges every call; inputs are prepared first if needed."""
    for inp in inputs:
        if inp.f_locals is None:
            inp.prepare(code)
    ents = entries(code)
    backends_equal = all(e.backend == ents[0].backend for e in ents)
    compiled_before = len(tag.compiled)
    oracle = OracleRoots()
    calls: list[Call] = []
    ctx = (torch.compiler.set_stance("default", skip_guard_eval_unsafe=True) if stance
           else torch.compiler.set_stance("default"))
    with ctx:
        for k, order in enumerate(call_orders):
            for i in order:
                inp = inputs[i]
                if inp.setup is not None:
                    inp.setup()
                ents = entries(code)
                expected, disagree = full_pick(ents, inp.f_locals, oracle)
                tag.served.clear()
                error, result_ok = None, False
                try:
                    out = inp.compiled()
                    result_ok = same_result(out, inp.expected)
                except Exception as e:  # noqa: BLE001 - a failed call is a finding
                    error = _err(e)
                calls.append(Call(k, inp.name, [entry_id(e) for e in ents], expected,
                                  list(tag.served), result_ok, error, disagree))
    return Report(stance, calls, len(call_orders), len(entries(code)), backends_equal,
                  len(tag.compiled) - compiled_before)


def count_guards(root: Any) -> int:
    """Leaf guards of a guard tree, epilogue lambdas included (as
    ``recorder.count_tree_guards`` counts them); None counts 0."""
    if root is None:
        return 0
    from guardjit.recorder import count_tree_guards

    return sum(count_tree_guards(root).values())


def diff_root_guards(guard_manager: Any) -> int:
    """Leaf guards of an entry's differentiating root (``diff_guard_root``,
    None: 0, in which case the entry routes nothing under the stance)."""
    return count_guards(getattr(guard_manager, "diff_guard_root", None))


__all__ = ["TaggingBackend", "Input", "Call", "Report", "capture_locals", "entries", "entry_id",
           "full_root", "OracleRoots", "full_pick", "same_result", "orders", "check_routing", "count_guards",
           "diff_root_guards", "STANCE_ERROR"]
