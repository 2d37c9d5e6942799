"""Scenarios of ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``,
run the same way with plain torch (a subprocess, ``GUARDJIT`` unset: ``python
stance_scenarios.py`` prints every scenario's calls as JSON) and with
guardjit (in-process, test_stance.py).

Each scenario warms a compiled function up with a few inputs (one cache entry
each), then calls the warmed inputs under the stance, in every cache order
the LRU can reach (:meth:`Run.all_orders`). Every call records its output,
eager's output and, with ``oracle=True``, which compiled graph ran (the
backend tags each graph with its compile id) and which entry a *full* lookup
picks in the cache order of that moment: the first entry, front first, whose
Dynamo tree passes on the call's frame locals. Dynamo's own tree is the
oracle: for a guardjit unit it is the tree guardjit's check replaced
(``wrapper.dynamo_root``), for any other entry its root.

Functions read no closure variables (their frame locals are exactly their
arguments) and have no graph break (one code object per scenario).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
import json
import sys
from typing import Any, Callable

import torch
from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
from torch._dynamo.guards import DeletedGuardManagerWrapper
from torch._guards import CompileContext

STANCE_MISS = "stance-miss"  # the stance's "Recompilation triggered ..." error
NO_ENTRY = "miss"  # the oracle: no entry's full guards pass


@dataclasses.dataclass
class Target:
    """A compiled callable, its eager twin and the frame Dynamo compiles."""

    opt: Callable
    eager: Callable
    frame_fn: Callable  # the function whose code object has the cache entries
    self_arg: Any = None  # the module, for a forward frame

    @property
    def code(self):
        return self.frame_fn.__code__

    def f_locals(self, args: tuple, kwargs: dict) -> dict:
        pre = () if self.self_arg is None else (self.self_arg,)
        bound = inspect.signature(self.frame_fn).bind(*pre, *args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)


def _flat(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.detach().tolist()
    if isinstance(out, (tuple, list)):
        return [_flat(o) for o in out]
    return out


class Run:
    """The calls of one scenario."""

    def __init__(self, oracle: bool) -> None:
        self.oracle = oracle
        self.calls: list[dict] = []
        self.ran: list[str] = []
        self.in_stance = False
        self.codes: set = set()  # the code objects called
        self._trees: dict[int, tuple] = {}  # id(wrapper) -> (wrapper, tree clone)
        self.backend = self._backend  # one object: torch matches cache entries by backend

    def _backend(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        tag = str(CompileContext.current_compile_id())

        def run(*args: Any) -> Any:
            self.ran.append(tag)
            return gm.forward(*args)

        return run

    @contextlib.contextmanager
    def stance(self):
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            self.in_stance = True
            try:
                yield
            finally:
                self.in_stance = False

    def full_lookup(self, t: Target, args: tuple, kwargs: dict) -> str:
        f_locals = t.f_locals(args, kwargs)
        for e in _debug_get_cache_entry_list(t.code):
            w = e.guard_manager
            if isinstance(w, DeletedGuardManagerWrapper):
                continue
            if self._tree(w).check(f_locals):
                return str(e.compile_id)
        return NO_ENTRY

    def _tree(self, w: Any) -> Any:
        """A clone of the entry's Dynamo tree: checking the tree itself would
        count failures in it, and torch picks its diff sources by those
        counts, so the oracle would change what plain torch does."""
        kept = self._trees.get(id(w))
        if kept is None or kept[0] is not w:
            tree = getattr(w, "dynamo_root", None) or w.root
            kept = (w, tree.clone_manager(lambda m: True))
            self._trees[id(w)] = kept
        return kept[1]

    def call(self, label: str, t: Target, *args: Any, ctx: Callable = contextlib.nullcontext,
             **kwargs: Any) -> None:
        self.codes.add(t.code)
        with ctx():
            expect = self.full_lookup(t, args, kwargs) if self.oracle and self.in_stance else None
            first = len(self.ran)
            out, error = None, None
            try:
                out = t.opt(*args, **kwargs)
            except RuntimeError as e:
                if "Recompilation triggered with skip_guard_eval_unsafe stance" not in str(e):
                    raise
                error = STANCE_MISS
            ran = self.ran[first:]
            ref = t.eager(*args, **kwargs)
        self.calls.append({"label": label, "stance": self.in_stance, "out": _flat(out),
                           "eager": _flat(ref), "error": error,
                           "ran": ran[0] if ran else None, "expect": expect})

    def all_orders(self, t: Target, inputs: list[tuple]) -> None:
        """For every order O of the warmed entries (front first) and every
        input i: calls the inputs in reverse O (each hit moves its entry to the
        front, so that establishes O), then i. ``inputs``: (label, args,
        kwargs[, ctx])."""
        def one(inp: tuple) -> None:
            label, args, kwargs, *ctx = inp
            self.call(label, t, *args, ctx=ctx[0] if ctx else contextlib.nullcontext, **kwargs)

        for order in itertools.permutations(inputs):
            for probe in inputs:
                for inp in reversed(order):
                    one(inp)
                one(probe)


@dataclasses.dataclass
class Scenario:
    fn: Callable[[Run], None]
    # Plain torch serves some warmed input with the wrong graph here (the
    # test then asserts that it still does, so the flag stays true).
    torch_misroutes: bool = False
    # An unsafe guard filter lets an entry serve inputs it was not compiled
    # for even in a full lookup: its output is then not eager's.
    unsafe_filters: bool = False


SCENARIOS: dict[str, Scenario] = {}


def scenario(torch_misroutes: bool = False, unsafe_filters: bool = False):
    def register(fn):
        SCENARIOS[fn.__name__] = Scenario(fn, torch_misroutes, unsafe_filters)
        return fn
    return register


def _fn_target(run: Run, fn: Callable, **compile_kwargs: Any) -> Target:
    return Target(torch.compile(fn, backend=run.backend, **compile_kwargs), fn, fn)


# --- torch's test/dynamo/test_skip_guard_eval_unsafe.py (v2.13.0), ported ---

def _cache_line_fn(x, a=None, b=None):
    x = x * 3
    if a:
        x = x * 5
    if b:
        x = x * 7
    return x


@scenario()
def cache_line_pickup(run: Run) -> None:
    """torch's test_cache_line_pickup (None and int arguments)."""
    t = _fn_target(run, _cache_line_fn)
    x = torch.ones(4)
    inputs = [("a=None,b=None", (x,), {"a": None, "b": None}),
              ("a=1,b=None", (x,), {"a": 1, "b": None}),
              ("a=1,b=1", (x,), {"a": 1, "b": 1})]
    for label, args, kwargs in inputs:
        run.call(label, t, *args, **kwargs)
    with run.stance():
        for label, args, kwargs in inputs:  # torch's own sequence first
            run.call(label, t, *args, **kwargs)
        run.all_orders(t, inputs)


def _bool_fn(x, y, c):
    if c:
        return x * y
    return x + y


@scenario()
def bool_recompile(run: Run) -> None:
    """torch's test_bool_recompile (backend="eager" here)."""
    t = _fn_target(run, _bool_fn)
    x, y = 2 * torch.ones(4), 3 * torch.ones(4)
    inputs = [("c=True", (x, y, True), {}), ("c=False", (x, y, False), {})]
    for label, args, kwargs in inputs:
        run.call(label, t, *args, **kwargs)
    with run.stance():
        run.call("c=False", t, x, y, False)
        run.call("c=True", t, x, y, True)
        run.all_orders(t, inputs)


def _mul_fn(x, y):
    return x * y


@scenario()
def tensor_recompile(run: Run) -> None:
    """torch's test_tensor_recompile (dtype), with a third dtype."""
    t = _fn_target(run, _mul_fn)
    x = torch.arange(4, dtype=torch.float32)
    inputs = [("float32", (x, x + 1), {}),
              ("float64", (x.double(), x.double() + 1), {}),
              ("int64", (x.long(), x.long() + 1), {})]
    for label, args, kwargs in inputs:
        run.call(label, t, *args, **kwargs)
    with run.stance():
        run.all_orders(t, inputs)


class _Foo:
    def __init__(self) -> None:
        self.a = 4
        self.b = 5


_foo = _Foo()


def _post_recompile_fn(x):
    return x + _foo.a + _foo.b


@scenario()
def post_recompile(run: Run) -> None:
    """torch's test_post_recompile: a global object's attribute set back and
    forth under the stance; after it, a new value recompiles as usual."""
    _foo.a, _foo.b = 4, 5
    t = _fn_target(run, _post_recompile_fn)
    x = torch.ones(4)
    run.call("a=4", t, x)
    _foo.a = 11
    run.call("a=11", t, x)
    with run.stance():
        for a in (4, 11, 4, 11, 11, 4, 4):
            _foo.a = a
            run.call(f"a={a}", t, x)
    _foo.b = 8
    run.call("a=4,b=8 (recompiles)", t, x)
    with run.stance():
        for a, b in ((4, 8), (4, 5), (11, 5), (4, 8), (11, 5), (4, 5)):
            _foo.a, _foo.b = a, b
            run.call(f"a={a},b={b}", t, x)
    _foo.a, _foo.b = 4, 5


def _dict_fn(dt):
    return dt["x"] + 1


@scenario()
def fail_on_tensor_shape_change(run: Run) -> None:
    """torch's test_fail_on_tensor_shape_change: an input never warmed up
    with a new shape (the full lookup misses; torch raises the stance's
    error, and so must guardjit under torch-compatible)."""
    t = _fn_target(run, _dict_fn)
    run.call("(4,)", t, {"x": torch.ones(4)})
    with run.stance():
        run.call("(4,)", t, {"x": torch.ones(4)})
        run.call("(4, 4) never warmed", t, {"x": torch.ones(4, 4)})


def _add_one(x):
    return x + 1


@scenario(unsafe_filters=True)
def skip_all_guards_single_cache_entry(run: Run) -> None:
    """torch's test_skip_all_guards_single_cache_entry: a guardless entry
    serves a new shape under the stance."""
    t = _fn_target(run, _add_one,
                   options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe})
    run.call("(4,)", t, torch.ones(4))
    with run.stance():
        run.call("(4, 4)", t, torch.ones(4, 4))
        run.call("(4,)", t, torch.ones(4))


# --- issue 11, point 1 ---

def _int_fn(x, n):
    return x * n + n


@scenario()
def int_args(run: Run) -> None:
    """Int arguments: a specialized entry, then an automatic-dynamic one."""
    t = _fn_target(run, _int_fn)
    x = torch.ones(3)
    inputs = [(f"n={n}", (x, n), {}) for n in (2, 3, 4)]
    for label, args, kwargs in inputs:
        run.call(label, t, *args, **kwargs)
    with run.stance():
        run.all_orders(t, inputs)
        run.call("n=9 (accepted by the dynamic entry)", t, x, 9)


def _scale_fn(x):
    return x * 2 + x.shape[0]


@scenario()
def static_shapes(run: Run) -> None:
    """Batch sizes marked static (dynamic=False): one entry per size."""
    t = _fn_target(run, _scale_fn, dynamic=False)
    inputs = [(f"batch {n}", (torch.ones(n),), {}) for n in (2, 3, 4)]
    for label, args, kwargs in inputs:
        run.call(label, t, *args, **kwargs)
    with run.stance():
        run.all_orders(t, inputs)


def _rows_fn(x):
    return x.sum(0) + x.shape[0]


@scenario()
def dynamic_shapes(run: Run) -> None:
    """dynamic=True: the size-1 specialization beside the dynamic entry, and a
    rank change; batch 7 was never warmed but the dynamic entry's full guards
    accept it."""
    t = _fn_target(run, _rows_fn, dynamic=True)
    inputs = [("(5, 2)", (torch.ones(5, 2),), {}), ("(1, 2)", (torch.ones(1, 2),), {}),
              ("(5,)", (torch.ones(5),), {})]
    for label, args, kwargs in inputs:
        run.call(label, t, *args, **kwargs)
    with run.stance():
        run.all_orders(t, inputs)
        run.call("(7, 2)", t, torch.ones(7, 2))


@scenario()
def mark_dynamic(run: Run) -> None:
    """mark_dynamic on dim 0 of a 2-D input beside a 1-D static input."""
    t = _fn_target(run, _rows_fn)
    a = torch.ones(6, 2)
    torch._dynamo.mark_dynamic(a, 0)
    b = torch.ones(3)
    inputs = [("(6, 2) dim 0 dynamic", (a,), {}), ("(3,)", (b,), {})]
    for label, args, kwargs in inputs:
        run.call(label, t, *args, **kwargs)
    with run.stance():
        run.all_orders(t, inputs)
        c = torch.ones(9, 2)
        run.call("(9, 2)", t, c)


def _grad_fn(x):
    return (x * 2).sum()


@scenario()
def requires_grad(run: Run) -> None:
    t = _fn_target(run, _grad_fn)
    plain = torch.ones(3)
    leaf = torch.ones(3, requires_grad=True)
    inputs = [("requires_grad=False", (plain,), {}), ("requires_grad=True", (leaf,), {})]
    for label, args, kwargs in inputs:
        run.call(label, t, *args, **kwargs)
    with run.stance():
        run.all_orders(t, inputs)


@scenario()
def grad_mode(run: Run) -> None:
    """Units that differ only in global state (grad mode)."""
    t = _fn_target(run, _grad_fn)
    leaf = torch.ones(3, requires_grad=True)
    inputs = [("grad enabled", (leaf,), {}), ("no_grad", (leaf,), {}, torch.no_grad)]
    run.call("grad enabled", t, leaf)
    run.call("no_grad", t, leaf, ctx=torch.no_grad)
    with run.stance():
        run.all_orders(t, inputs)


class Scaled(torch.nn.Module):
    def __init__(self, scale, offset: float) -> None:
        super().__init__()
        self.scale = scale
        self.offset = offset

    def forward(self, x):
        return x * self.scale + self.offset


@scenario()
def module_attributes(run: Run) -> None:
    """Two instances of one module class whose attributes differ, and one
    attribute changed between warm-ups."""
    m1, m2 = Scaled(2, 0.5), Scaled(3, 0.25)
    o1 = torch.compile(m1, backend=run.backend)
    o2 = torch.compile(m2, backend=run.backend)
    t1 = Target(o1, m1, Scaled.forward, m1)
    t2 = Target(o2, m2, Scaled.forward, m2)
    x = torch.ones(2)
    run.call("m1", t1, x)
    run.call("m2", t2, x)
    m1.scale = 5
    run.call("m1 scale=5", t1, x)
    with run.stance():
        for i in range(3):
            for t, label, scale in ((t2, "m2", 3), (t1, "m1 scale=5", 5), (t1, "m1", 2),
                                    (t2, "m2", 3), (t1, "m1", 2), (t1, "m1 scale=5", 5)):
                if t is t1:
                    m1.scale = scale
                run.call(label, t, x)
    m1.scale = 2


class TrainEval(torch.nn.Module):
    def forward(self, x):
        if self.training:
            return x * 2
        return x * 3


@scenario()
def train_eval(run: Run) -> None:
    m = TrainEval()
    o = torch.compile(m, backend=run.backend)
    t = Target(o, m, TrainEval.forward, m)
    x = torch.ones(2)
    run.call("train", t, x)
    m.eval()
    run.call("eval", t, x)
    with run.stance():
        for mode in ("train", "eval", "eval", "train", "train", "eval", "train"):
            m.train(mode == "train")
            run.call(mode, t, x)
    m.train()


SCALE = 2


def _global_fn(x):
    return x * SCALE


@scenario()
def globals_changed(run: Run) -> None:
    """A global constant changed between warm-ups, set back and forth under
    the stance."""
    global SCALE
    t = _fn_target(run, _global_fn)
    x = torch.ones(2)
    for value in (2, 3, 4):
        SCALE = value
        run.call(f"SCALE={value}", t, x)
    with run.stance():
        for order in itertools.permutations((2, 3, 4)):
            for value in order + order[::-1]:
                SCALE = value
                run.call(f"SCALE={value}", t, x)
    SCALE = 2


def _filtered_fn(x, flag):
    return x * 2 if flag else x * 3


@scenario(unsafe_filters=True)
def filtered_and_guardless(run: Run) -> None:
    """Units of one code compiled with different guard filters: all guards,
    tensor guards only, and none (guardless) side by side."""
    full = Target(torch.compile(_filtered_fn, backend=run.backend), _filtered_fn, _filtered_fn)
    tensors = Target(torch.compile(
        _filtered_fn, backend=run.backend,
        options={"guard_filter_fn": torch.compiler.keep_tensor_guards_unsafe}),
        _filtered_fn, _filtered_fn)
    none = Target(torch.compile(
        _filtered_fn, backend=run.backend,
        options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe}),
        _filtered_fn, _filtered_fn)
    x = torch.ones(3)
    run.call("all guards, flag=True", full, x, True)
    run.call("all guards, flag=False", full, x, False)
    run.call("tensor guards, (2, 2) flag=True", tensors, torch.ones(2, 2), True)
    run.call("no guards, (5,) flag=False", none, torch.ones(5), False)
    with run.stance():
        run.all_orders(full, [("flag=True", (x, True), {}), ("flag=False", (x, False), {}),
                              ("(2, 2) flag=True", (torch.ones(2, 2), True), {})])


@scenario()
def four_entries(run: Run) -> None:
    """More than two entries: four, in all 24 orders."""
    t = _fn_target(run, _cache_line_fn)
    x = torch.ones(2)
    inputs = [(f"a={a},b={b}", (x,), {"a": a, "b": b})
              for a, b in ((None, None), (1, None), (None, 1), (1, 1))]
    for label, args, kwargs in inputs:
        run.call(label, t, *args, **kwargs)
    with run.stance():
        run.all_orders(t, inputs)


@scenario()
def added_after_stance(run: Run) -> None:
    """Entries added after the stance was entered and left."""
    t = _fn_target(run, _cache_line_fn)
    x = torch.ones(2)
    inputs = [("a=None,b=None", (x,), {"a": None, "b": None}),
              ("a=1,b=None", (x,), {"a": 1, "b": None})]
    for label, args, kwargs in inputs:
        run.call(label, t, *args, **kwargs)
    with run.stance():
        run.all_orders(t, inputs)
    inputs.append(("a=1,b=1", (x,), {"a": 1, "b": 1}))
    run.call("a=1,b=1 (compiled after the stance)", t, x, a=1, b=1)
    with run.stance():
        run.all_orders(t, inputs)
    inputs.append(("dtype float64", (x.double(),), {"a": None, "b": None}))
    run.call("float64 (compiled after the stance)", t, x.double())
    with run.stance():
        run.all_orders(t, inputs)


class GatedMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)
        self.gate = 0.5

    def forward(self, x, y):
        return torch.relu(self.a(x)) * self.gate + self.b(y)


@contextlib.contextmanager
def _attribute(obj: Any, name: str, value: Any):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@scenario()
def module_with_parameters(run: Run) -> None:
    """A module with parameters (static shapes): a float attribute, aliased
    inputs and a batch size beside the base input."""
    m = GatedMLP().eval()
    t = Target(torch.compile(m, backend=run.backend, dynamic=False), m, GatedMLP.forward, m)
    torch.manual_seed(0)
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    inputs = [("base", (x, y), {}),
              ("gate=0.75", (x, y), {}, lambda: _attribute(m, "gate", 0.75)),
              ("x is y", (x, x), {}),
              ("batch 3", (torch.randn(3, 8), torch.randn(3, 8)), {})]
    with torch.no_grad():
        for label, args, kwargs, *ctx in inputs:
            run.call(label, t, *args, ctx=ctx[0] if ctx else contextlib.nullcontext, **kwargs)
        with run.stance():
            run.all_orders(t, inputs)


def run_scenario(name: str, oracle: bool,
                 inspect_entries: Callable[[Run], None] | None = None) -> list[dict]:
    """The scenario's calls; ``inspect_entries(run)`` runs before the cache
    is reset."""
    torch._dynamo.reset()
    run = Run(oracle)
    try:
        SCENARIOS[name].fn(run)
        if inspect_entries is not None:
            inspect_entries(run)
    finally:
        torch._dynamo.reset()
    return run.calls


def main() -> None:
    """Every scenario with plain torch: {name: calls} as JSON on stdout."""
    print(json.dumps({name: run_scenario(name, oracle=False) for name in sorted(SCENARIOS)}))


if __name__ == "__main__":
    assert "guardjit" not in sys.modules, "run with GUARDJIT unset"
    main()
