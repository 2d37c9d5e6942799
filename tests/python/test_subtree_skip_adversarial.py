"""Adversarial mutations against sound subtree skipping (docs/subtree-skipping.md).

Each test compiles one small model three ways: guardjit (skipping on, a
counting backend), plain ``torch.compile`` (its own counting backend) and
eager, on separate deep copies. It warms up until skipping answers calls
(hits counted), mutates all three copies the same way, and calls again.
guardjit must return eager's result and recompile whenever plain torch does.
Where plain torch 2.13 itself serves a stale graph, the test says so and
checks that guardjit gives exactly plain torch's answer with plain torch's
compile count (guardjit may be stricter than torch, never looser).

Order of the calls: eager, then guardjit, then plain torch. guardjit and plain
torch compile the same code objects, so a compile on the plain-torch side
writes its `__compiled_fn_*` into the shared module globals, which changes
that dict's version and makes guardjit's next call run its full check. Calling
guardjit first after every mutation keeps that from hiding a stale skip.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import types

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounter
from torch.overrides import TorchFunctionMode

import guardjit
from guardjit import plugin

# Tiny models: the mechanism, not whether a plan pays (conftest.py).
pytestmark = pytest.mark.usefixtures("skip_every_plan")

D = 8


@pytest.fixture(autouse=True)
def _room_for_both_sides():
    # guardjit's and plain torch's entries share each code object's cache.
    # (torch's config.patch, not monkeypatch: pytest >= 9.2 undoes a setattr
    # on torch's config module with delattr, which hides the option.)
    with torch._dynamo.config.patch(recompile_limit=64):
        yield


def _hits() -> int:
    return guardjit.stats()["subtree_skip"]["hits"]


def _close(a, b) -> bool:
    try:
        torch.testing.assert_close(a, b)
    except AssertionError:
        return False
    return True


class Pair:
    """guardjit, plain torch and eager copies of one model."""

    def __init__(self, make, x=None) -> None:
        torch.manual_seed(0)
        self.eager = make()
        self.gj_model = copy.deepcopy(self.eager)
        self.pt_model = copy.deepcopy(self.eager)
        self.gj_count, self.pt_count = CompileCounter(), CompileCounter()
        self.gj = guardjit.compile(self.gj_model, backend=self.gj_count)
        self.pt = torch.compile(self.pt_model, backend=self.pt_count)
        self.x = torch.randn(2, D) if x is None else x

    @property
    def counts(self) -> tuple[int, int]:
        return self.gj_count.frame_count, self.pt_count.frame_count

    def outputs(self, x=None):
        x = self.x if x is None else x
        want = self.eager(x)
        return want, self.gj(x), self.pt(x)

    def warm(self, calls: int = 3, ctx=torch.no_grad) -> None:
        """Warms up until skipping answers calls; fails if it never does."""
        with ctx():
            self.outputs()
            plugin.wait_for_tier_up()
            # The first call's snapshot predates the end of Dynamo's compile
            # (and the plain-torch compile writes the shared globals): record
            # afresh, then count hits.
            self.outputs()
            before = _hits()
            for _ in range(calls):
                self.check()
        assert _hits() - before >= calls, "subtree skipping never engaged"

    def mutate(self, fn) -> None:
        for m in (self.eager, self.gj_model, self.pt_model):
            fn(m)

    def check(self, x=None, torch_stale: bool = False):
        """One call of each. guardjit must match eager; plain torch too,
        unless it is known to serve a stale graph here, in which case
        guardjit must give plain torch's (stale) answer."""
        want, got_gj, got_pt = self.outputs(x)
        if torch_stale:
            assert not _close(got_pt, want), "plain torch is no longer stale here"
            torch.testing.assert_close(got_gj, got_pt)
        else:
            torch.testing.assert_close(got_gj, want)
            torch.testing.assert_close(got_pt, want)
        return got_gj

    def step(self, fn, *, x=None, ctx=torch.no_grad, recompiles=None,
             torch_stale: bool = False, calls: int = 2) -> None:
        """Mutates, calls `calls` times under `ctx`, compares compile counts.
        `recompiles`: True/False asserts plain torch did or did not recompile."""
        before = self.counts
        with torch.no_grad():
            self.mutate(fn)
        with ctx():
            for _ in range(calls):
                self.check(x, torch_stale=torch_stale)
        gj, pt = self.counts
        assert gj - before[0] == pt - before[1], (before, self.counts)
        if recompiles is not None:
            assert (pt > before[1]) == recompiles, (before, self.counts)


def _seeded(fn, seed: int = 5):
    """A mutation that builds new modules: the same weights in every copy."""

    def mutate(m):
        torch.manual_seed(seed)
        fn(m)

    return mutate


class Block(torch.nn.Module):
    scale = 1.0  # a class attribute read through the instance

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(D, D)

    def forward(self, x):
        return self.lin(x) * self.scale


class Tree(torch.nn.Module):
    """Submodules reached by attribute, ModuleDict key and ModuleList index."""

    def __init__(self) -> None:
        super().__init__()
        self.a = Block()
        self.b = Block()
        self.md = torch.nn.ModuleDict({"p": Block(), "q": Block()})
        self.ml = torch.nn.ModuleList([Block(), Block()])
        self.alpha = 0.5

    def forward(self, x):
        x = self.b(self.a(x)) * self.alpha
        for k in self.md:
            x = self.md[k](x)
        for m in self.ml:
            x = m(x)
        return x


# --- module state --------------------------------------------------------


def test_train_eval_toggled():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(D, D)
            self.bn = torch.nn.BatchNorm1d(D)
            self.drop = torch.nn.Dropout(0.0)

        def forward(self, x):
            y = self.drop(self.bn(self.lin(x)))
            return y * 2.0 if self.training else y

    pair = Pair(Net)
    pair.warm()
    pair.step(lambda m: m.eval(), recompiles=True)
    pair.step(lambda m: m.train(), recompiles=False)  # the first entry again
    pair.step(lambda m: m.bn.eval(), recompiles=True)  # a submodule only


def test_attribute_deleted_falls_back_to_the_class_attribute():
    def make():
        t = Tree()
        t.b.scale = 2.0  # shadows Block.scale in the instance dict
        return t

    pair = Pair(make)
    pair.warm()

    def delete(m):
        del m.b.scale  # now Block.scale (1.0) again

    pair.step(delete, recompiles=True)


def test_class_attribute_changed():
    pair = Pair(Tree)
    pair.warm()
    try:
        pair.step(lambda m: setattr(Block, "scale", 3.0), recompiles=True)
    finally:
        Block.scale = 1.0


def test_buffer_and_parameter_registered_after_warmup():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(D, D)
            self.b = torch.nn.Linear(D, D)

        def forward(self, x):
            y = self.b(self.a(x))
            for buf in self.a._buffers.values():
                y = y + buf
            for p in self.b._parameters.values():
                y = y + p.sum()
            return y

    pair = Pair(Net)
    pair.warm()
    pair.step(_seeded(lambda m: m.a.register_buffer("extra", torch.randn(D))), recompiles=True)
    pair.step(_seeded(lambda m: m.b.register_parameter(
        "extra_p", torch.nn.Parameter(torch.randn(D)))), recompiles=True)
    # An unused buffer on another submodule: no guard reads it.
    pair.step(lambda m: m.b.register_buffer("unused", torch.ones(D)), recompiles=False)


def test_parameter_replaced_with_another_dtype_then_shape():
    pair = Pair(Tree)
    pair.warm()

    def to_double(m):
        m.to(torch.float64)
        m.ml[1].lin.weight = torch.nn.Parameter(torch.ones(D, D, dtype=torch.float64))

    pair.step(to_double, x=pair.x.double(), recompiles=True)

    def narrower(m):  # the last layer now maps D -> 4
        m.ml[1].lin.weight = torch.nn.Parameter(torch.ones(4, D, dtype=torch.float64))
        m.ml[1].lin.bias = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))

    pair.step(narrower, x=pair.x.double(), recompiles=True)
    assert pair.gj(pair.x.double()).shape == (2, 4)


def test_requires_grad_changed_under_enable_grad():
    pair = Pair(Tree)
    pair.warm()
    pair.warm(ctx=torch.enable_grad)  # a second entry, skipping on it too
    pair.step(lambda m: m.md["q"].lin.weight.requires_grad_(False),
              ctx=torch.enable_grad, recompiles=True)


def test_buffer_dtype_changed_through_data():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(D, D)
            self.register_buffer("shift", torch.ones(D))

        def forward(self, x):
            return self.lin(x) + self.shift

    pair = Pair(Net)
    pair.warm()

    def to_double(m):
        m.shift.data = m.shift.data.double()  # same object, same dicts

    pair.step(to_double, recompiles=True)


def test_parametrization_and_weight_norm_added():
    class Neg(torch.nn.Module):
        def forward(self, w):
            return -w

    pair = Pair(Tree)
    pair.warm()
    # register_parametrization swaps a's class for a generated subclass and
    # moves weight into a ModuleDict of parametrizations.
    pair.step(lambda m: torch.nn.utils.parametrize.register_parametrization(
        m.a.lin, "weight", Neg()), recompiles=True)
    pair.step(lambda m: torch.nn.utils.parametrizations.weight_norm(m.ml[0].lin),
              recompiles=True)
    pair.step(lambda m: torch.nn.utils.parametrize.remove_parametrizations(m.a.lin, "weight"),
              recompiles=True)


# --- hooks and code ------------------------------------------------------


def test_forward_hooks_added_and_removed():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = Block()
            self.b = Block()
            self.handle = self.a.register_forward_hook(lambda mod, args, out: out * 2.0)

        def forward(self, x):
            return self.b(self.a(x))

    pair = Pair(Net)
    pair.warm()
    # Removing a hook that was traced: both recompile.
    pair.step(lambda m: m.handle.remove(), recompiles=True)
    # Adding hooks to a submodule after warm-up: torch 2.13 skips guards on
    # nn.Module hooks (config.skip_nnmodule_hook_guards=True, documented), so
    # plain torch serves the old graph; guardjit has the same guards and
    # gives the same answer with the same compile count.
    pair.step(lambda m: m.b.register_forward_pre_hook(lambda mod, args: (args[0] * 3.0,)),
              torch_stale=True, recompiles=False)


def test_forward_replaced_on_the_instance_and_on_the_class():
    pair = Pair(Tree)
    pair.warm()

    def instance_forward(m):
        m.md["p"].forward = types.MethodType(lambda self, x: self.lin(x) + 1.0, m.md["p"])

    pair.step(instance_forward, recompiles=True)
    orig = Block.forward
    try:
        # A class-level forward replaced: plain torch 2.13 keeps serving the
        # graph it traced through the old Block.forward (its guards on a
        # submodule's type are TYPE_MATCH only); guardjit has the same guards.
        pair.step(lambda m: setattr(Block, "forward", lambda self, x: self.lin(x) * -1.0),
                  torch_stale=True, recompiles=False)
    finally:
        Block.forward = orig


SCALE = 1.0


def _helper(y):
    return y * SCALE


def _helper_other(y):
    return y - 1.0


def test_global_constant_function_and_code_changed():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(D, D)

        def forward(self, x):
            return _helper(self.lin(x))

    global SCALE, _helper
    orig_helper, orig_code = _helper, _helper.__code__
    pair = Pair(Net)
    pair.warm()
    try:
        def swap_code(m):
            _helper.__code__ = _helper_other.__code__

        pair.step(swap_code, recompiles=True)
        pair.warm()  # skipping engages again on the new entry

        def restore_code(m):
            _helper.__code__ = orig_code

        pair.step(restore_code, recompiles=False)  # the first entry again
        pair.warm()

        def rebind(m):
            global _helper
            _helper = lambda y: y * -2.0  # noqa: E731

        pair.step(rebind, recompiles=True)
        _helper = orig_helper
        pair.warm()

        def scale(m):
            global SCALE
            SCALE = 3.0

        # (From here the float is dynamic: a SHAPE_ENV guard on it, and the
        # new unit declines skipping.)
        pair.step(scale, recompiles=True)
    finally:
        SCALE = 1.0
        orig_helper.__code__ = orig_code
        _helper = orig_helper


def test_torch_function_monkeypatched():
    orig = F.linear
    pair = Pair(Tree)
    pair.warm()
    try:
        def patch(m):
            F.linear = lambda i, w, b=None: orig(i, w, b) * 10.0

        pair.step(patch, recompiles=True)
    finally:
        F.linear = orig


# --- containers ----------------------------------------------------------


def test_module_dict_and_module_list_edited():
    pair = Pair(Tree)
    pair.warm()
    # Same type and shapes: no guard fails, the new weights are graph inputs.
    pair.step(_seeded(lambda m: m.md.__setitem__("q", Block())), recompiles=False)
    pair.step(_seeded(lambda m: m.ml.__setitem__(1, Block()), seed=6), recompiles=False)
    pair.step(_seeded(lambda m: m.md.__setitem__("r", Block()), seed=7), recompiles=True)
    pair.step(_seeded(lambda m: m.ml.append(Block()), seed=8), recompiles=True)

    def delete_first(m):
        del m.ml[0]  # ModuleList re-keys _modules

    pair.step(delete_first, recompiles=True)


def test_dict_attribute_mutated_in_place():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(D, D)
            self.gains = {"a": 1.0, "b": 2.0}

        def forward(self, x):
            y = self.lin(x)
            for k, v in self.gains.items():
                y = y * v + len(k)
            return y

    pair = Pair(Net)
    pair.warm()
    pair.step(lambda m: m.gains.__setitem__("a", 3.0), recompiles=True)
    pair.step(lambda m: m.gains.__setitem__("a", m.gains.pop("a")), recompiles=True)  # order
    pair.step(lambda m: m.gains.__setitem__("c", 0.5), recompiles=True)


def test_ordered_dict_attribute_reordered():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(D, D)
            self.gains = collections.OrderedDict(a=1.0, b=2.0)

        def forward(self, x):
            y = self.lin(x)
            for k, v in self.gains.items():
                y = y * v - (1.0 if k == "a" else 0.0)
            return y

    pair = Pair(Net)
    pair.warm()
    pair.step(lambda m: m.gains.__setitem__("b", 4.0), recompiles=True)
    # move_to_end reorders the OrderedDict's own list, not the dict beneath:
    # torch 2.13 guards the keys as list(dict.keys(...)) (the dict's order)
    # and serves the old graph; so does guardjit (same guards; no dict
    # version changes either).
    pair.step(lambda m: m.gains.move_to_end("a"), torch_stale=True, recompiles=False)


def test_shared_submodule_mutated_and_weights_tied():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = Block()
            self.b = Block()
            self.c = self.a  # the same module in two places

        def forward(self, x):
            return self.c(self.b(self.a(x)))

    pair = Pair(Net)
    pair.warm()
    pair.step(lambda m: setattr(m.a, "scale", 2.0), recompiles=True)  # seen through c too
    pair.step(lambda m: m.c.lin.weight.requires_grad_(False), recompiles=True)

    def tie(m):
        m.b.lin.weight = m.a.lin.weight

    pair.step(tie)

    def untie(m):  # c is no longer a
        torch.manual_seed(9)
        m.c = Block()
        m.c.scale = 2.0

    pair.step(untie)


# --- objects reached from modules ----------------------------------------


class Cfg:
    def __init__(self) -> None:
        self.scale = 1.0


class WithCfg(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(D, D)
        self.cfg = Cfg()

    def forward(self, x):
        return self.lin(x) * self.cfg.scale


def test_fresh_config_object_then_changed_in_place():
    """A config object made after warm-up has never had its __dict__ read
    (CPython 3.11 keeps its attributes in the inline values layout). The
    full check accepts it without a recompile; the snapshot taken then must
    still see the next in-place write."""
    pair = Pair(WithCfg)
    pair.warm()
    pair.step(lambda m: setattr(m, "cfg", Cfg()), recompiles=False, calls=3)
    pair.step(lambda m: setattr(m.cfg, "scale", 3.0), recompiles=True)


def test_config_object_class_and_dict_replaced():
    pair = Pair(WithCfg)
    pair.warm()

    class Scaled(Cfg):
        scale = property(lambda self: 4.0)  # a data descriptor wins over __dict__

    pair.step(lambda m: setattr(m.cfg, "__class__", Scaled), recompiles=True)
    pair.step(lambda m: setattr(m.cfg, "__class__", Cfg), recompiles=False)
    pair.warm()
    # A new __dict__ with the same contents: the full check passes and the
    # snapshot is taken on the new dict, whose in-place change must be seen.
    pair.step(lambda m: setattr(m.cfg, "__dict__", {"scale": 1.0}), recompiles=False)
    pair.warm()
    pair.step(lambda m: vars(m.cfg).__setitem__("scale", 6.0), recompiles=True)


def test_property_added_to_the_config_class():
    class LocalCfg:
        def __init__(self) -> None:
            self.scale = 1.0

    def make():
        m = WithCfg()
        m.cfg = LocalCfg()
        return m

    pair = Pair(make)
    pair.warm()
    # A data descriptor on the type now wins over the instance dict: the
    # type's version tag changes, no dict does.
    prop = property(lambda self: 7.0)
    pair.step(lambda m: setattr(LocalCfg, "scale", prop), recompiles=True)


def _act(y, *, k=2.0):
    return y * k


def test_function_attribute_kwdefaults_changed_in_place():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(D, D)
            # its own function object (and __kwdefaults__ dict) per copy
            self.act = types.FunctionType(_act.__code__, _act.__globals__, "act")
            self.act.__kwdefaults__ = {"k": 2.0}

        def forward(self, x):
            return self.act(self.lin(x))

        def __deepcopy__(self, memo):
            new = Net()
            new.load_state_dict(self.state_dict())
            return new

    pair = Pair(Net)
    pair.warm()
    pair.step(lambda m: m.act.__kwdefaults__.__setitem__("k", 3.0), recompiles=True)
    pair.step(lambda m: setattr(m.act, "__kwdefaults__", {"k": 2.0}), recompiles=False)


def test_int_attribute_becomes_dynamic():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(D, D)
            self.n = 2

        def forward(self, x):
            return self.lin(x) * self.n

    pair = Pair(Net)
    pair.warm()
    pair.step(lambda m: setattr(m, "n", 3), recompiles=True)
    # From here each side may treat n as dynamic: only the counts must agree.
    for n in (4, 1, 4):
        pair.step(lambda m, n=n: setattr(m, "n", n))


# --- global state --------------------------------------------------------


class _DefaultDtype:
    def __enter__(self):
        self.grad = torch.no_grad()
        self.grad.__enter__()
        torch.set_default_dtype(torch.float64)

    def __exit__(self, *exc):
        torch.set_default_dtype(torch.float32)
        self.grad.__exit__(*exc)


class _Identity(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _mode_no_grad():
    with torch.no_grad(), _Identity():
        yield


def test_global_state_toggled():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(D, D)

        def forward(self, x):
            return self.lin(x) + torch.ones(D).to(x.dtype) * torch.ones(1).element_size()

    pair = Pair(Net)
    pair.warm()
    nothing = lambda m: None  # noqa: E731
    pair.step(nothing, ctx=torch.inference_mode, recompiles=True)
    pair.step(nothing, ctx=lambda: torch.autocast("cpu", dtype=torch.bfloat16), recompiles=True)
    pair.step(nothing, ctx=torch.enable_grad, recompiles=True)
    pair.step(nothing, ctx=_DefaultDtype, recompiles=True)
    pair.step(nothing, ctx=_mode_no_grad, recompiles=True)
    pair.step(nothing, recompiles=False)  # back to the first state: its entry


# --- several frames, several instances -----------------------------------


def test_two_instances_of_one_class_alternate():
    """Two modules of one class share forward's code object, so their calls
    meet the same cache entries and the same skip snapshot."""
    torch.manual_seed(0)
    eager = [Tree(), Tree()]
    gj_models = [copy.deepcopy(m) for m in eager]
    pt_models = [copy.deepcopy(m) for m in eager]
    gj_count, pt_count = CompileCounter(), CompileCounter()
    gj = [guardjit.compile(m, backend=gj_count) for m in gj_models]
    pt = [torch.compile(m, backend=pt_count) for m in pt_models]
    x = torch.randn(2, D)
    before = _hits()
    with torch.no_grad():
        gj[0](x), pt[0](x)
        plugin.wait_for_tier_up()
        for i in range(8):
            if i == 3:  # one instance's attribute changes
                for models in (eager, gj_models, pt_models):
                    models[1].alpha = 2.0
            if i == 5:  # the other one's tensor metadata
                for models in (eager, gj_models, pt_models):
                    models[0].ml[0].lin.weight.requires_grad_(False)
            for k in (0, 1, 0):
                want = eager[k](x)
                torch.testing.assert_close(gj[k](x), want)
                torch.testing.assert_close(pt[k](x), want)
    assert _hits() > before
    assert gj_count.frame_count == pt_count.frame_count


def test_per_block_compile_of_identical_blocks():
    """Each block compiled on its own (a common way to compile a stack): one
    cache entry serves every block of a kind. Answers must stay each block's
    own. (The entry's single snapshot is invalidated by every other block,
    so skipping falls back on each call and turns itself off after 8: no
    speed-up for this pattern today.)"""
    torch.manual_seed(0)
    blocks = [Block() for _ in range(4)]
    for i, b in enumerate(blocks):
        b.scale = float(i % 2 + 1)  # two values: two entries
    sides = [copy.deepcopy(blocks), copy.deepcopy(blocks)]
    counts = [CompileCounter(), CompileCounter()]
    compiled = [[guardjit.compile(b, backend=counts[0]) for b in sides[0]],
                [torch.compile(b, backend=counts[1]) for b in sides[1]]]
    x = torch.randn(2, D)

    def run_stack():
        ys = [x, x]
        for k, b in enumerate(blocks):
            want = b(ys[0])
            for s in (0, 1):
                ys[s] = compiled[s][k](ys[s])
                torch.testing.assert_close(ys[s], want)

    with torch.no_grad():
        for _ in range(10):
            run_stack()
            plugin.wait_for_tier_up()
        for bs in (blocks, *sides):
            bs[2].lin.weight.data.mul_(-1.0)  # values only: no guard
            bs[3].scale = 1.0  # now like blocks 0 and 2
            bs[1].lin.weight.requires_grad_(False)  # a new entry
        for _ in range(2):
            run_stack()
    assert counts[0].frame_count == counts[1].frame_count == 3


def test_deepcopy_of_the_module_compiled_again():
    pair = Pair(Tree)
    pair.warm()
    with torch.no_grad():
        copies = [copy.deepcopy(m) for m in (pair.eager, pair.gj_model, pair.pt_model)]
        gj2 = guardjit.compile(copies[1], backend=pair.gj_count)
        pt2 = torch.compile(copies[2], backend=pair.pt_count)
        before = pair.counts
        for _ in range(3):
            want = copies[0](pair.x)
            torch.testing.assert_close(gj2(pair.x), want)
            torch.testing.assert_close(pt2(pair.x), want)
            pair.check()
        assert pair.counts == before  # same guards pass for the copy
        for m in copies:
            m.md["p"].scale = 5.0  # only the copy changes
        for _ in range(2):
            want = copies[0](pair.x)
            torch.testing.assert_close(gj2(pair.x), want)
            torch.testing.assert_close(pt2(pair.x), want)
            pair.check()  # the originals keep their answers
    gj, pt = pair.counts
    assert gj == pt and gj > before[0]
