"""Sound subtree skipping (Runtime/SubtreeSkip.h, docs/subtree-skipping.md).

Each fault class that made torch turn ``use_recursive_dict_tags_for_guards``
off is reproduced on a small model: with skipping engaged (hits counted), the
mutation happens, and guardjit must recompile exactly when plain torch does
(the same program compiled by ``torch.compile`` beside it, its own counting
backend) and return eager's result. Plus: the switch, torch's option turning
it on, threads mutating modules during calls, and exit with live guards.
"""

from __future__ import annotations

import copy
import gc
import subprocess
import sys
import textwrap
import threading
import types

import pytest
import torch

import guardjit
from guardjit import _core, plugin

# Tiny models: the mechanism, not whether a plan pays (conftest.py).
pytestmark = pytest.mark.usefixtures("skip_every_plan")


class Counter:
    """A backend that counts compiles (each is one Dynamo frame compile)."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, gm, example_inputs):
        self.n += 1
        return gm.forward


class Norm(torch.nn.Module):
    def __init__(self, d: int, cfg) -> None:
        super().__init__()
        self.cfg = cfg
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.register_buffer("shift", torch.zeros(d))

    def forward(self, x):
        return x * self.weight * self.cfg.scale + self.shift


class Cfg:
    def __init__(self) -> None:
        self.scale = 1.0


class Layer(torch.nn.Module):
    def __init__(self, d: int, cfg) -> None:
        super().__init__()
        self.cfg = cfg
        self.norm = Norm(d, cfg)
        self.lin = torch.nn.Linear(d, d)
        self.alpha = 0.5
        self.gains = [1.0, 2.0]

    def forward(self, x):
        y = self.lin(self.norm(x)) * self.alpha
        for g in self.gains:
            y = y * g
        return y


class Stack(torch.nn.Module):
    def __init__(self, n: int = 3, d: int = 8) -> None:
        super().__init__()
        self.cfg = Cfg()
        self.layers = torch.nn.ModuleList(Layer(d, self.cfg) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _skip_stats(opt) -> dict:
    return guardjit.stats()["subtree_skip"]


def _fresh(compile_kwargs: dict) -> dict:
    """A copy of torch.compile kwargs with its own ``options`` dict (torch.compile
    pops ``guard_filter_fn`` and ``use_aoti`` from it, torch/__init__.py)."""
    return {k: dict(v) if k == "options" and isinstance(v, dict) else v
            for k, v in compile_kwargs.items()}


class Pair:
    """The same model compiled by guardjit (skipping on) and by plain torch,
    each with its own counting backend; eager is a third copy."""

    def __init__(self, make=Stack, x=None, compile_kwargs=None) -> None:
        torch.manual_seed(0)
        self.eager = make()
        self.gj_model = copy.deepcopy(self.eager)
        self.pt_model = copy.deepcopy(self.eager)
        self.gj_count, self.pt_count = Counter(), Counter()
        # One options dict per compile: torch.compile pops guard_filter_fn
        # from the dict it is given, so a shared one would leave the second
        # compile unfiltered.
        kw = compile_kwargs or {}
        self.gj = guardjit.compile(self.gj_model, backend=self.gj_count, **_fresh(kw))
        self.pt = torch.compile(self.pt_model, backend=self.pt_count, **_fresh(kw))
        self.x = torch.randn(2, 8) if x is None else x

    def warm(self, calls: int = 4) -> int:
        """Calls both, waits for the residual's native code; returns the hits
        of guardjit's skipping on the last calls (must be > 0)."""
        with torch.no_grad():
            self.call()
            plugin.wait_for_tier_up()
            # The snapshot of the first call predates the end of Dynamo's
            # compile (it touches module dicts): this call records afresh.
            self.call()
            before = _skip_stats(self.gj)["hits"]
            for _ in range(calls):
                self.call()
        return _skip_stats(self.gj)["hits"] - before

    def warm_only(self) -> None:
        """Both compiled, guardjit's residual native, calls repeated (no
        result compared: under an unsafe option torch's may be stale)."""
        for _ in range(2):
            self.gj(self.x), self.pt(self.x)
        plugin.wait_for_tier_up()
        for _ in range(3):
            self.gj(self.x), self.pt(self.x)

    def mutate(self, fn) -> None:
        for m in (self.eager, self.gj_model, self.pt_model):
            fn(m)

    def call(self, x=None):
        x = self.x if x is None else x
        want = self.eager(x)
        got_gj, got_pt = self.gj(x), self.pt(x)
        torch.testing.assert_close(got_gj, want)
        torch.testing.assert_close(got_pt, want)
        return got_gj

    def same_compiles(self) -> None:
        assert self.gj_count.n == self.pt_count.n, (self.gj_count.n, self.pt_count.n)


@pytest.fixture
def pair():
    assert _skip_stats(None)["enabled"]
    return Pair()


def _mutation_case(pair: Pair, mutate, x=None, recompiles: bool = True) -> None:
    assert pair.warm() > 0, "subtree skipping never engaged"
    compiles = pair.gj_count.n
    pair.mutate(mutate)
    with torch.no_grad():
        pair.call(x)
        pair.call(x)
    pair.same_compiles()
    if recompiles:
        assert pair.gj_count.n > compiles


def test_skipping_engages_and_residual_is_small(pair):
    assert pair.warm() >= 4
    unit = plugin.units()[-1]
    st = _core.skip_stats(unit.check)
    assert st["residual_native"] and st["snapshot"] and st["subtrees"] >= 1
    residual = _core.residual_set(unit.check).count_by_kind()
    # What no dict tag captures stays: tensor metadata, the list of gains,
    # global state. Module identity, float attributes, dict keys do not.
    assert "TENSOR_MATCH" in residual
    assert "DICT_CONTAINS" not in residual and "OBJECT_ALIASING" not in residual
    assert st["implied_guards"] > st["residual_guards"] / 2


def test_requires_grad_in_place_on_a_parameter(pair):
    _mutation_case(pair, lambda m: m.layers[1].lin.weight.requires_grad_(False))


def test_param_data_replaced(pair):
    def mutate(m):
        w = m.layers[0].lin.weight
        w.data = torch.ones(8, 8).t()  # same dict, new strides
    _mutation_case(pair, mutate)


def test_buffer_resize_and_set(pair):
    def resize(m):
        m.layers[2].norm.shift.resize_(1)
        m.layers[2].norm.shift.zero_()
    _mutation_case(pair, resize)

    def set_(m):
        m.layers[2].norm.shift.set_(torch.zeros(8))
    pair.mutate(set_)
    with torch.no_grad():
        pair.call()
    pair.same_compiles()


def test_module_to_float64(pair):
    _mutation_case(pair, lambda m: m.to(torch.float64), x=torch.randn(2, 8, dtype=torch.float64))


def test_class_reassigned(pair):
    class Doubled(Layer):
        def forward(self, x):
            return super().forward(x) * 2

    def mutate(m):
        m.layers[1].__class__ = Doubled
    _mutation_case(pair, mutate)


def test_aliasing_through_a_skipped_subtree(pair):
    def mutate(m):
        other = Cfg()  # same values, another object: the aliasing guard fails
        m.layers[2].norm.cfg = other
    _mutation_case(pair, mutate)


def test_parameter_passed_as_input_aliases():
    """An input that is one of the skipped subtree's own parameters: the
    aliasing relation between a live input and a recorded parameter stays in
    the residual check."""
    pair = Pair()
    assert pair.warm() > 0
    with torch.no_grad():
        outs = [fn(m.layers[0].norm.weight)
                for m, fn in ((pair.eager, pair.eager), (pair.gj_model, pair.gj),
                              (pair.pt_model, pair.pt))]
    torch.testing.assert_close(outs[1], outs[0])
    torch.testing.assert_close(outs[2], outs[0])
    pair.same_compiles()


def test_star_args_and_kwargs_items_stay_live():
    """Items of `L['args']` / `L['kwargs']` (new containers on every call)
    are never taken from a snapshot: a specialized int argument that changes
    must recompile, as in plain torch, and give the new result."""
    lin = torch.nn.Linear(4, 4)

    def f(*args, **kwargs):
        return lin(args[0]) * args[1] + kwargs["bias"]

    gj_count, pt_count = Counter(), Counter()
    gj = guardjit.compile(f, backend=gj_count)
    pt = torch.compile(f, backend=pt_count)
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(2):
            gj(x, 2, bias=1.0), pt(x, 2, bias=1.0)
        plugin.wait_for_tier_up()
        for k, bias in ((2, 1.0), (2, 1.0), (3, 1.0), (3, 2.0), (2, 1.0)):
            want = f(x, k, bias=bias)
            torch.testing.assert_close(gj(x, k, bias=bias), want)
            torch.testing.assert_close(pt(x, k, bias=bias), want)
        torch.testing.assert_close(gj(torch.randn(3, 4), 2, bias=1.0).shape, torch.Size([3, 4]))
        pt(torch.randn(3, 4), 2, bias=1.0)
    assert gj_count.n == pt_count.n


def test_list_attribute_appended_in_place(pair):
    _mutation_case(pair, lambda m: m.layers[0].gains.append(3.0))


def test_list_item_changed_in_place(pair):
    def mutate(m):
        m.layers[0].gains[1] = 5.0
    _mutation_case(pair, mutate)


def test_float_attribute_changed(pair):
    def mutate(m):
        m.layers[1].alpha = 0.25
    _mutation_case(pair, mutate)


def test_shared_config_changed(pair):
    def mutate(m):
        m.cfg.scale = 3.0
    _mutation_case(pair, mutate)


def test_submodule_replaced_by_a_new_object(pair):
    def mutate(m):
        torch.manual_seed(1)
        new = Layer(8, m.cfg)
        new.alpha = 0.75  # same type and shapes; a value the guards check
        m.layers[1] = new
    _mutation_case(pair, mutate)


def test_address_reuse_cannot_match():
    """A submodule dropped and a fresh one of the same type allocated in its
    place (CPython's allocator tends to hand the same address back) must not
    be taken for the recorded one: the dict that held it changed version."""
    pair = Pair()
    assert pair.warm() > 0
    for m in (pair.eager, pair.gj_model, pair.pt_model):
        for _ in range(3):
            m.layers[2].norm = None
            norm = Norm(8, m.cfg)
            norm.shift.fill_(1.0)
            norm.weight.requires_grad_(False)  # a difference TENSOR_MATCH sees
            m.layers[2].norm = norm
    with torch.no_grad():
        pair.call()
        pair.call()
    pair.same_compiles()


def test_modules_unchanged_keep_hitting(pair):
    assert pair.warm(calls=20) == 20
    st = _core.skip_stats(plugin.units()[-1].check)
    assert st["fallbacks"] == 0 and not st["disabled"]


def test_mutated_every_call_stops_skipping():
    """A module attribute written on every call changes its __dict__ version
    each time: after a few fallbacks the unit stops validating (stats say so)
    and its answers stay right."""

    class Counting(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.step = 0

        def forward(self, x):
            return self.lin(x)

    torch.manual_seed(0)
    m = Counting()
    opt = guardjit.compile(m, backend="eager")
    x = torch.randn(2, 4)
    with torch.no_grad():
        opt(x)
        plugin.wait_for_tier_up()
        for i in range(30):
            m.step = i  # not read by forward: a guard-free change of __dict__
            torch.testing.assert_close(opt(x), m(x))
    st = _core.skip_stats(plugin.units()[-1].check)
    assert st["disabled"] and st["fallbacks"] >= 8


def test_switch_off(monkeypatch):
    monkeypatch.setattr(plugin.config, "subtree_skip", False)
    assert _skip_stats(None)["source"] == "off"
    pair = Pair()
    with torch.no_grad():
        pair.call()
        plugin.wait_for_tier_up()
        pair.call()
    assert _core.skip_stats(plugin.units()[-1].check) is None


@torch._dynamo.config.patch(use_recursive_dict_tags_for_guards=True)
def test_torch_option_turns_it_on(monkeypatch):
    monkeypatch.setattr(plugin.config, "subtree_skip", False)
    st = _skip_stats(None)
    assert st["enabled"] and st["source"] == "torch use_recursive_dict_tags_for_guards"
    pair = Pair()
    assert pair.warm() > 0
    _mutation_case(pair, lambda m: m.layers[1].lin.weight.requires_grad_(False))


def test_environment_switch():
    code = "import guardjit.plugin as p; print(p.config.subtree_skip, p.subtree_skip_source())"
    for value, want in (("0", "False off"), ("1", "True guardjit default")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**__import__("os").environ, "GUARDJIT_SUBTREE_SKIP": value},
                             check=True).stdout.strip()
        assert out == want


def test_threads_mutating_modules_during_calls():
    """Callers in threads while another thread flips a float attribute and
    replaces a parameter's data: every answer is eager's for one of the
    states the model was in during the call (each state has one output)."""
    torch.manual_seed(0)
    m = Stack(n=2)
    opt = guardjit.compile(m, backend="eager")
    x = torch.randn(2, 8)
    lin = m.layers[0].lin
    weights = (lin.weight.data.clone(), lin.weight.data.clone() * -1.0)
    with torch.no_grad():
        states = []
        for alpha in (0.5, 0.25):
            for w in weights:
                m.layers[0].alpha = alpha
                lin.weight.data = w
                states.append(m(x).clone())
        m.layers[0].alpha = 0.5
        lin.weight.data = weights[0]
        opt(x)
        plugin.wait_for_tier_up()
    errors: list = []
    stop = threading.Event()

    def caller():
        with torch.no_grad():
            while not stop.is_set():
                out = opt(x)
                if not any(torch.allclose(out, s) for s in states):
                    errors.append(out)

    def mutator():
        for i in range(200):
            m.layers[0].alpha = (0.5, 0.25)[i % 2]
            lin.weight.data = weights[i // 2 % 2]
        m.layers[0].alpha = 0.5
        lin.weight.data = weights[0]

    threads = [threading.Thread(target=caller) for _ in range(2)]
    for t in threads:
        t.start()
    mut = threading.Thread(target=mutator)
    mut.start()
    mut.join()
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    with torch.no_grad():
        torch.testing.assert_close(opt(x), states[0])


def test_exit_with_live_guards():
    code = textwrap.dedent("""
        import torch, guardjit
        from guardjit import plugin
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
        opt = guardjit.compile(m, backend="eager")
        x = torch.randn(2, 4)
        with torch.no_grad():
            opt(x)
            plugin.wait_for_tier_up()
            for _ in range(5):
                opt(x)
        st = guardjit.stats()["subtree_skip"]
        assert st["hits"] >= 4, st
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ok") and "Traceback" not in r.stderr


def _defaults_set():
    """A hand-built set: L['f'] (a function) -> __defaults__ (a Field step:
    a pointer compare, no tag) -> [0] (a tuple item, no step of its own) ==
    3.0 (implied). Dynamo's own sets read defaults items through get_item
    (a live read), so this is the runtime's contract tested directly."""
    s = _core.GuardSet("defaults")
    key = s.add_object("key", "f", True, "'f'")
    fn_type = s.add_object("type", types.FunctionType, True, "function")
    three = s.add_object("constant", 3.0, True, "3.0")
    f = s.add_value("frame_local", 0, "L['f']", name="f", key=key)
    d = s.add_value("func_defaults", f, "L['f'].__defaults__")
    k = s.add_value("tuple_get_item", d, "L['f'].__defaults__[0]", index=0)
    s.add_guard("type_match", [f], object=fn_type)
    s.add_guard("equals_match", [k], object=three)
    return s


def test_a_field_steps_object_cannot_be_replaced_at_its_address():
    """The recorded `__defaults__` tuple is freed when replaced, and a second
    fresh 1-tuple comes from the tuple free list, at its address: the Field
    step's pointer compare would pass and the item's implied EQUALS_MATCH
    would answer for the old tuple. The plan holds the recorded tuple, so the
    address cannot come back: the check falls back and fails, as the full
    set does."""
    bound = _core.bind(_defaults_set())
    check = _core.make_guard(bound, None)
    scale = 3.0

    def make():
        def f(x, k=scale * 1.0):  # a defaults tuple of its own
            return x * k
        return f

    f = make()
    fl = {"f": f}
    assert _core.enable_subtree_skip(check, fl, cost_model=False) == ""
    assert check(fl) and check(fl)
    st = _core.skip_stats(check)
    assert st["records"] == 1 and st["hits"] == 1
    recorded = id(f.__defaults__)
    f.__defaults__ = (7.0,)
    f.__defaults__ = tuple([float(5)])
    assert id(f.__defaults__) != recorded
    assert bound.interpret(fl) is False
    assert check(fl) is False
    assert _core.skip_stats(check)["fallbacks"] == 1


def test_held_objects_are_released_with_the_check():
    bound = _core.bind(_defaults_set())
    check = _core.make_guard(bound, None)

    def f(x, k=float("3")):
        return x * k

    defaults = f.__defaults__
    before = sys.getrefcount(defaults)
    fl = {"f": f}
    assert _core.enable_subtree_skip(check, fl, cost_model=False) == ""
    assert check(fl) and check(fl)
    assert sys.getrefcount(defaults) == before + 1  # held by the snapshot
    new = tuple([3.0])
    held_by_f = sys.getrefcount(new) + 1
    f.__defaults__ = new
    assert check(fl)  # a fallback, a new snapshot: the old tuple is released
    assert sys.getrefcount(defaults) == before - 1  # f no longer holds it either
    assert sys.getrefcount(new) == held_by_f + 1  # the new snapshot holds the new one
    del check
    gc.collect()
    assert sys.getrefcount(new) == held_by_f


def test_equal_constant_holding_a_tensor_changed_in_place():
    """`conv.padding == (1, 1)` is implied while conv's __dict__ is unchanged,
    which holds only if the tuple cannot change in place. A tuple holding a
    0-d tensor equal to 1 passes the full check, and `fill_(0)` then changes
    it with no tag: record() refuses such a snapshot, so guardjit recompiles
    and returns eager's result. Plain torch 2.13 serves the old graph here
    (its default check keeps passing an immutable-looking value under an
    unchanged dict; check_verbose fails)."""

    class Conv(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(2, 2, 3, padding=1)

        def forward(self, x):
            return self.conv(x)

    pair = Pair(Conv, torch.randn(1, 2, 5, 5))
    assert pair.warm() > 0
    check = plugin.units()[-1].check
    zeros = []

    def mutate(m):
        t = torch.tensor(1)
        zeros.append(t)
        m.conv.padding = (t, 1)
    pair.mutate(mutate)
    with torch.no_grad():
        pair.call()
        for t in zeros:
            t.fill_(0)
        want = pair.eager(pair.x)
        torch.testing.assert_close(pair.gj(pair.x), want)
        stale = pair.pt(pair.x)
    assert want.shape == (1, 2, 3, 5) and stale.shape == (1, 2, 5, 5)  # plain torch: the old graph
    assert pair.gj_count.n == pair.pt_count.n + 1
    assert _core.skip_stats(check)["record_failures"] >= 1


class _Marker:
    """A plain class: its instances are not descriptors, until __get__ and
    __set__ are added to the class."""


class _ShadowedCfg:
    scale = _Marker()  # found on the type, shadowed by the instance dict

    def __init__(self) -> None:
        self.scale = 1.0


class _ShadowModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.cfg = _ShadowedCfg()

    def forward(self, x):
        return self.lin(x) * self.cfg.scale


def test_class_of_a_shadowed_class_attribute_becomes_a_data_descriptor():
    """`cfg.scale` reads the instance dict while the class attribute of the
    same name is a plain object. When that object's class gains __get__ and
    __set__, it wins over the instance dict: no dict or type version that
    the plan checked changes (only _Marker's), so the read is not stable.
    guardjit must recompile as plain torch does (found by an adversarial
    test: it served the old graph)."""
    torch.manual_seed(0)
    eager = _ShadowModel()
    saved = dict(vars(_Marker))
    try:
        got = {}
        for name, compile_fn in (("guardjit", guardjit.compile), ("torch", torch.compile)):
            m, x = copy.deepcopy(eager), torch.randn(2, 4)
            counter = Counter()
            opt = compile_fn(m, backend=counter)
            with torch.no_grad():
                opt(x)
                plugin.wait_for_tier_up()
                for _ in range(3):
                    opt(x)
                _Marker.__get__ = lambda self, obj, typ=None: 5.0
                _Marker.__set__ = lambda self, obj, value: None
                assert m.cfg.scale == 5.0
                for _ in range(2):
                    torch.testing.assert_close(opt(x), m(x))
            got[name] = counter.n
            for k in ("__get__", "__set__"):
                delattr(_Marker, k)
        assert got["guardjit"] == got["torch"] == 2, got
    finally:
        for k in ("__get__", "__set__"):
            if k in vars(_Marker) and k not in saved:
                delattr(_Marker, k)


@pytest.mark.parametrize("option", [
    "skip_guard_on_inbuilt_nn_modules_unsafe", "skip_guard_on_all_nn_modules_unsafe",
    "install_free_tensors", "use_recursive_dict_tags_for_guards"])
def test_mutations_under_torchs_options_as_plain_torch(option):
    """Skipping beside torch's guard options: guardjit with the option (its
    guards are torch's filtered set, then skipped) must recompile exactly when
    plain torch with the same option does and return the same output. Under
    an unsafe filter that output may be torch's stale one; it must be the
    same stale one, never another.

    Each side gets its own options dict (Pair): torch.compile pops
    guard_filter_fn from the dict it is given, and a shared one left plain
    torch unfiltered, which looked like guardjit missing the requires_grad
    guard torch keeps. Under both nn-module filters torch drops the Linear
    weight's TENSOR_MATCH, so requires_grad_ recompiles neither side."""
    from guardjit.bench.options import option_kwargs

    compile_kwargs, config = option_kwargs(option)
    with torch._dynamo.config.patch(**config), torch.no_grad():
        pair = Pair(compile_kwargs=compile_kwargs)
        pair.warm_only()
        mutations = (
            lambda m: m.layers[1].lin.weight.requires_grad_(False),
            lambda m: setattr(m.layers[1], "alpha", 0.25),
            lambda m: m.layers[0].gains.append(3.0),
            lambda m: setattr(m.cfg, "scale", 2.0),
        )
        for i, mutate in enumerate(mutations):
            before = pair.pt_count.n
            pair.mutate(mutate)
            for _ in range(2):
                torch.testing.assert_close(pair.gj(pair.x), pair.pt(pair.x))
            pair.same_compiles()
            if i == 0:  # requires_grad_ of an inbuilt Linear's weight
                assert (pair.pt_count.n > before) == ("nn_modules" not in option)
