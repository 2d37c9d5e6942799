"""Warm-up recipes of ``python -m guardjit bench --suite diffsets``.

Each scenario builds, for one configuration (plain torch or guardjit with a
differentiating-set policy), a program compiled with a
:class:`guardjit.lab.routing.TaggingBackend` and the list of its warmed-up inputs.
The worker warms up by calling every input once, in order (``Input.setup``
first), so the recipe is identical in every configuration. What makes the
compile units differ is what the issue lists: static batch sizes, dtype,
train/eval, a bool flag, module attributes (two instances of one class), a
global, ``None`` arguments, ``requires_grad``, a symbolic-shape relation,
guard-filtered and guardless units, a transformers model at two sequence
lengths.

A scenario's functions live at module level, so every process compiles the
same code objects with the same globals.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from guardjit.lab.routing import Input, TaggingBackend


@dataclasses.dataclass
class Scenario:
    name: str
    description: str
    code: Any  # the code object whose cache entries are checked
    inputs: list[Input]
    grad: bool = True  # torch.set_grad_enabled while it runs
    lru: bool = True  # torch's default; False: entries keep creation order
    # The warm-up calls the first N inputs under the stance once before it
    # warms up input N (an entry added after the stance was entered and left).
    stance_after: int | None = None
    dynamo_config: dict = dataclasses.field(default_factory=dict)


Factory = Callable[[TaggingBackend, bool], Scenario]


def _call(opt: Callable, fn: Callable, *args: Any, **kwargs: Any) -> tuple[Callable, Callable]:
    return (lambda: opt(*args, **kwargs)), (lambda: fn(*args, **kwargs))


def _inp(name: str, opt: Callable, fn: Callable, *args: Any, setup: Callable | None = None,
         **kwargs: Any) -> Input:
    c, e = _call(opt, fn, *args, **kwargs)
    return Input(name, c, e, setup)


# --- batch sizes marked static ---------------------------------------------------------

_W = torch.randn(8, 8, generator=torch.Generator().manual_seed(0))


def batched_linear(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ _W) * x.shape[0]


def static_batch(tag: TaggingBackend, quick: bool) -> Scenario:
    opt = torch.compile(batched_linear, backend=tag)
    ins = []
    for b in ((2, 4) if quick else (2, 4, 8, 16)):
        x = torch.randn(b, 8, generator=torch.Generator().manual_seed(b))
        torch._dynamo.mark_static(x, 0)
        ins.append(_inp(f"batch={b}", opt, batched_linear, x))
    return Scenario("static-batch", "relu(x @ W) * batch, batch sizes marked static "
                    "(torch._dynamo.mark_static): one unit per size", batched_linear.__code__, ins)


# --- dtype ---------------------------------------------------------------------------------

def mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * y + 1


def dtype(tag: TaggingBackend, quick: bool) -> Scenario:
    opt = torch.compile(mul, backend=tag)
    ins = []
    for dt in (torch.float32, torch.float64, torch.bfloat16):
        x, y = torch.ones(4, dtype=dt) * 2, torch.ones(4, dtype=dt) * 3
        ins.append(_inp(str(dt).replace("torch.", ""), opt, mul, x, y))
    return Scenario("dtype", "x * y + 1 on float32, float64, bfloat16 (torch's "
                    "test_tensor_recompile, one more dtype)", mul.__code__, ins)


# --- train / eval ----------------------------------------------------------------------------

class TrainEval(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return y * 2 if self.training else y - 1


def train_eval(tag: TaggingBackend, quick: bool) -> Scenario:
    torch.manual_seed(0)
    mod = TrainEval()
    opt = torch.compile(mod, backend=tag)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    ins = [_inp("train", opt, mod, x, setup=lambda: mod.train()),
           _inp("eval", opt, mod, x, setup=lambda: mod.eval())]
    return Scenario("train-eval", "a module whose forward branches on self.training, "
                    "called in train() then eval()", TrainEval.forward.__code__, ins)


# --- a bool flag argument -------------------------------------------------------------------

def flagged(x: torch.Tensor, *, relu: bool = False) -> torch.Tensor:
    y = x * 2 - 1
    if relu:
        y = torch.relu(y)
    return y


def bool_flag(tag: TaggingBackend, quick: bool) -> Scenario:
    opt = torch.compile(flagged, backend=tag)
    x = torch.linspace(-1, 1, 6)
    ins = [_inp("relu=False", opt, flagged, x, relu=False),
           _inp("relu=True", opt, flagged, x, relu=True)]
    return Scenario("bool-flag", "a keyword-only bool flag, False then True",
                    flagged.__code__, ins)


# --- two instances of one module class --------------------------------------------------------

class Scaled(nn.Module):
    def __init__(self, mode: str, repeats: int) -> None:
        super().__init__()
        self.mode = mode
        self.repeats = repeats

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.repeats):
            x = torch.tanh(x) if self.mode == "tanh" else torch.sigmoid(x)
        return x


def module_instances(tag: TaggingBackend, quick: bool) -> Scenario:
    a, b = Scaled("tanh", 1), Scaled("sigmoid", 2)
    oa, ob = torch.compile(a, backend=tag), torch.compile(b, backend=tag)
    x = torch.linspace(-2, 2, 5)
    ins = [_inp("tanh x1", oa, a, x), _inp("sigmoid x2", ob, b, x)]
    return Scenario("module-instances", "two instances of one module class (same forward "
                    "code, different self: a str and an int attribute), each torch.compile'd",
                    Scaled.forward.__code__, ins)


# --- a global constant changed between warm-ups ------------------------------------------------

SCALE = 2


def scaled_by_global(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE + 1


def _set_scale(v: int) -> Callable[[], None]:
    def set_it() -> None:
        global SCALE
        SCALE = v
    return set_it


def global_constant(tag: TaggingBackend, quick: bool) -> Scenario:
    opt = torch.compile(scaled_by_global, backend=tag)
    x = torch.ones(3)
    ins = [_inp(f"SCALE={v}", opt, scaled_by_global, x, setup=_set_scale(v)) for v in (2, 3)]
    return Scenario("global-constant", "x * SCALE + 1, the module global SCALE set to 2 then 3",
                    scaled_by_global.__code__, ins)


# --- the cache-line pickup (torch's test_cache_line_pickup) ------------------------------

def pickup(x: torch.Tensor, a: Any = None, b: Any = None) -> torch.Tensor:
    x = x * 3
    if a:
        x = x * 5
    if b:
        x = x * 7
    return x


def cache_line_pickup(tag: TaggingBackend, quick: bool) -> Scenario:
    opt = torch.compile(pickup, backend=tag)
    x = torch.ones(4)
    ins = [_inp(f"a={a},b={b}", opt, pickup, x, a=a, b=b)
           for a, b in ((None, None), (1, None), (1, 1))]
    return Scenario("cache-line-pickup", "fn(x, a=None, b=None), the issue's report "
                    "(torch's test_cache_line_pickup)", pickup.__code__, ins)


# --- torch's test_bool_recompile, backend eager -------------------------------------------------

def bool_fn(x: torch.Tensor, y: torch.Tensor, c: bool) -> torch.Tensor:
    if c:
        return x * y
    else:
        return x + y


def bool_recompile(tag: TaggingBackend, quick: bool) -> Scenario:
    opt = torch.compile(bool_fn, backend=tag)
    x, y = 2 * torch.ones(4), 3 * torch.ones(4)
    ins = [_inp("c=True", opt, bool_fn, x, y, True), _inp("c=False", opt, bool_fn, x, y, False)]
    return Scenario("bool-recompile", "fn(x, y, c): torch's test_bool_recompile with the "
                    "eager backend", bool_fn.__code__, ins)


# --- requires_grad ---------------------------------------------------------------------------------

def square_sum(x: torch.Tensor) -> torch.Tensor:
    return (x * x).sum(0)


def requires_grad(tag: TaggingBackend, quick: bool) -> Scenario:
    opt = torch.compile(square_sum, backend=tag)
    x0 = torch.randn(3, 2, generator=torch.Generator().manual_seed(0))
    x1 = x0.clone().requires_grad_(True)
    ins = [_inp("requires_grad=False", opt, square_sum, x0),
           _inp("requires_grad=True", opt, square_sum, x1)]
    return Scenario("requires-grad", "(x * x).sum(0), x without then with requires_grad "
                    "(grad mode on)", square_sum.__code__, ins)


# --- grad mode (global state) ---------------------------------------------------------------------

def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def grad_mode(tag: TaggingBackend, quick: bool) -> Scenario:
    opt = torch.compile(double, backend=tag)
    x = torch.ones(3, requires_grad=True)
    ins = [_inp("grad on", opt, double, x, setup=lambda: torch.set_grad_enabled(True)),
           _inp("grad off", opt, double, x, setup=lambda: torch.set_grad_enabled(False))]
    return Scenario("grad-mode", "x * 2 with grad mode on, then off (GLOBAL_STATE, a root "
                    "guard)", double.__code__, ins)


# --- aliased arguments -------------------------------------------------------------------------------

def add_into(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    return x * y


def aliasing(tag: TaggingBackend, quick: bool) -> Scenario:
    opt = torch.compile(add_into, backend=tag)
    a, b = torch.ones(3), torch.ones(3)

    def reset() -> None:
        a.fill_(1)
        b.fill_(5)
    ins = [_inp("fn(a, b)", opt, add_into, a, b, setup=reset),
           _inp("fn(a, a)", opt, add_into, a, a, setup=reset)]
    return Scenario("aliasing", "x.add_(1); x * y with distinct, then the same tensor "
                    "(the units differ in aliasing guards)", add_into.__code__, ins)


# --- an entry added after the stance was entered and left ---------------------------------------

def by_mode(x: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "double":
        return x * 2
    if mode == "square":
        return x * x
    return x - 1


def late_entry(tag: TaggingBackend, quick: bool) -> Scenario:
    opt = torch.compile(by_mode, backend=tag)
    x = torch.arange(4.0)
    ins = [_inp(f"mode={m}", opt, by_mode, x, m) for m in ("double", "square", "minus")]
    return Scenario("late-entry", "fn(x, mode: str): two modes warmed up and called under "
                    "the stance, then a third warmed up after leaving it", by_mode.__code__,
                    ins, stance_after=2)


# --- dynamic shapes that differ only in a shape relation --------------------------------------------

def maybe_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if x.shape[0] == y.shape[0]:
        return x + y
    return x.sum() + y.sum()


def shape_relation(tag: TaggingBackend, quick: bool) -> Scenario:
    opt = torch.compile(maybe_add, backend=tag, dynamic=True)
    ins = [_inp("len(x)==len(y)", opt, maybe_add, torch.ones(4), torch.ones(4) * 2),
           _inp("len(x)!=len(y)", opt, maybe_add, torch.ones(4), torch.ones(6) * 2)]
    return Scenario("shape-relation", "dynamic=True; the two units differ only in a "
                    "symbolic-shape relation (x.shape[0] == y.shape[0] or not)",
                    maybe_add.__code__, ins)


# --- a guard-filtered unit beside a guarded one ---------------------------------------------------

class TwoLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def filtered_beside_guarded(tag: TaggingBackend, quick: bool) -> Scenario:
    torch.manual_seed(0)
    mod = TwoLayer()
    full = torch.compile(mod, backend=tag, dynamic=False)
    filtered = torch.compile(mod, backend=tag, dynamic=False, options={
        "guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
    x2 = torch.randn(2, 6, generator=torch.Generator().manual_seed(2))
    x3 = torch.randn(3, 6, generator=torch.Generator().manual_seed(3))
    ins = [_inp("guarded, batch=2", full, mod, x2), _inp("filtered, batch=3", filtered, mod, x3)]
    return Scenario("filtered-beside-guarded", "one module compiled twice (equal backends, one "
                    "cache): a guarded unit (batch 2) and one built with "
                    "guard_filter_fn=skip_guard_on_all_nn_modules_unsafe (batch 3)",
                    TwoLayer.forward.__code__, ins)


# --- a guardless unit beside a guarded one (torch's
#     test_guard_free_entry_does_not_preempt_an_equal_backend) -----------------------------------------

def shape_plus(x: torch.Tensor, y: int) -> torch.Tensor:
    return x + x.shape[0] + y


def guardless_beside_guarded(tag: TaggingBackend, quick: bool) -> Scenario:
    w1 = torch.compile(shape_plus, backend=tag)
    w2 = torch.compile(shape_plus, backend=tag,
                       options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe})
    x3, x4 = torch.zeros(3), torch.zeros(4)
    # Warm-up: w1(x3), w2(x4); then the calls of torch's test (a full lookup
    # serves each without compiling: the entries' backends compare equal).
    ins = [_inp("guarded x3", w1, shape_plus, x3, 1), _inp("guardless x4", w2, shape_plus, x4, 1),
           _inp("w2(x3)", w2, shape_plus, x3, 1), _inp("w1(x4)", w1, shape_plus, x4, 1)]
    return Scenario("guardless-beside-guarded", "a guarded unit (x of size 3) and a guardless "
                    "one (skip_all_guards_unsafe, size 4) of one function; LRU off, "
                    "automatic_dynamic_shapes off, as in torch's test", shape_plus.__code__, ins,
                    lru=False, dynamo_config={"automatic_dynamic_shapes": False})


# --- a single guardless unit (torch's test_skip_all_guards_single_cache_entry) -------------------------

def plus_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def guardless_single(tag: TaggingBackend, quick: bool) -> Scenario:
    opt = torch.compile(plus_one, backend=tag,
                        options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe})
    ins = [_inp("x(4)", opt, plus_one, torch.ones(4))]
    return Scenario("guardless-single", "one unit built with skip_all_guards_unsafe (the "
                    "stance's fast path skips guard evaluation for it)", plus_one.__code__, ins)


# --- a transformers model at two sequence lengths --------------------------------------------------------

def gpt2_seqlens(tag: TaggingBackend, quick: bool) -> Scenario:
    from guardjit.bench.corpus import VOCAB, _hf_quiet

    _hf_quiet()
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=1 if quick else 2,
                     n_head=2, use_cache=False)
    model = GPT2LMHeadModel(cfg).eval()
    opt = torch.compile(model, backend=tag, dynamic=False)
    g = torch.Generator().manual_seed(0)
    ins = [_inp(f"seq={t}", opt, model, torch.randint(0, VOCAB, (1, t), generator=g))
           for t in (8, 16)]
    return Scenario("gpt2-seqlens", f"transformers GPT2LMHeadModel from a config "
                    f"({cfg.n_layer} layers, d=32), dynamic=False, sequence lengths 8 and 16, "
                    "no_grad", None, ins, grad=False)


SCENARIOS: dict[str, Factory] = {
    "static-batch": static_batch,
    "dtype": dtype,
    "train-eval": train_eval,
    "bool-flag": bool_flag,
    "module-instances": module_instances,
    "global-constant": global_constant,
    "cache-line-pickup": cache_line_pickup,
    "bool-recompile": bool_recompile,
    "requires-grad": requires_grad,
    "grad-mode": grad_mode,
    "aliasing": aliasing,
    "late-entry": late_entry,
    "shape-relation": shape_relation,
    "filtered-beside-guarded": filtered_beside_guarded,
    "guardless-beside-guarded": guardless_beside_guarded,
    "guardless-single": guardless_single,
    "gpt2-seqlens": gpt2_seqlens,
}
