"""TENSOR_MATCH read inline in native code (lib/JIT/LowerTensors.cpp) answers
as the helper it replaces, as the interpreter and as Dynamo's own check.

The JIT reads the TensorImpl fields at offsets lib/TorchRuntime took from
torch's headers and checked on probe tensors at import (TensorLayout in
TorchHooks.h); tensors outside the verified region (sparse, nested, symbolic
sizes, Python wrapper subclasses, views with a DifferentiableViewMeta, ...)
go to the helper. Here one real Dynamo unit guards tensors of every layout
case (0-d, 5 dims inline, 6 dims on the heap, non-contiguous views of a
tensor and of a leaf requiring grad, requires_grad leaf, grad_fn, Parameter,
subclass, meta, int dtype) and every native level
must give Dynamo's answer on frame locals that change each tensor (dtype,
shape, strides, requires_grad, Parameter vs Tensor, subclass, device, views,
sparse / nested / symbolic tensors of the exact type) or mutate it in place
(requires_grad_, .data =, set_, resize_ across the 5-dim inline capacity,
t_), under changed dispatch-key TLS (no_grad, inference_mode, included and
excluded keys). GUARDJIT_POISON_TENSOR_LAYOUT moves one offset: the check
at import must fail, say which field, and keep the helper, with the same
answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest
import torch

import guardjit
from guardjit import _core, plugin

LEVELS = ("O0", "O1")
POISONED = os.environ.get("GUARDJIT_POISON_TENSOR_LAYOUT", "")


class Sub(torch.Tensor):
    pass


def _leaf(*shape):
    return torch.zeros(*shape, requires_grad=True)


def recorded() -> dict:
    return dict(
        a=torch.zeros(2, 3),
        b=torch.zeros(()),
        c=torch.zeros(1, 2, 1, 2, 1, 2),
        d=torch.zeros(2, 3, 4, 5, 6),
        e=torch.zeros(4, 6)[:, ::2],
        v=_leaf(2, 3)[:, 1:],
        f=_leaf(3),
        g=_leaf(3) * 2,
        h=torch.zeros(3, dtype=torch.int64),
        p=torch.nn.Parameter(torch.zeros(2, 2)),
        q=torch.zeros(2).as_subclass(Sub),
        m=torch.zeros(2, device="meta"),
    )


def unit(a, b, c, d, e, v, f, g, h, p, q, m):
    cpu = a.sum() + b + c.sum() + d.sum() + e.sum() + v.sum() + f.sum() + g.sum() + h.sum()
    return cpu + p.sum() + q.sum(), m * 2


def _symbolic_meta():
    """A plain torch.Tensor whose sizes are symbolic (custom-sizes policy)."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    s = ShapeEnv().create_unbacked_symint()
    return torch.empty(s, device="meta")


def _nested():
    return torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])


def replacements(name: str, t: torch.Tensor) -> list:
    """(label, make) pairs: a new value for local `name`."""
    def like(**kw):
        return lambda: torch.zeros(t.shape, dtype=t.dtype, device=t.device, **kw)

    out = [
        ("same", lambda: t),
        ("fresh equal", lambda: t.detach().clone() if not isinstance(t, torch.nn.Parameter)
         else torch.nn.Parameter(t.detach().clone())),
        ("float64", lambda: torch.zeros(t.shape, dtype=torch.float64)),
        ("int64", lambda: torch.zeros(t.shape, dtype=torch.int64)),
        ("bigger", lambda: torch.zeros(*(s + 1 for s in t.shape))),
        ("one more dim", lambda: torch.zeros(1, *t.shape)),
        ("one less dim", lambda: torch.zeros(t.shape[1:]) if t.dim() else torch.zeros(1)),
        ("6 dims", lambda: torch.zeros(1, 2, 1, 2, 1, 2)),
        ("5 dims", lambda: torch.zeros(2, 3, 4, 5, 6)),
        ("0-d", lambda: torch.zeros(())),
        ("strides", lambda: torch.zeros(*reversed(t.shape)).permute(
            *reversed(range(t.dim()))) if t.dim() > 1 else torch.zeros(2 * max(t.numel(), 1))[::2]),
        ("requires_grad", like(requires_grad=True) if t.is_floating_point() else like()),
        ("no requires_grad", lambda: torch.zeros(t.shape, dtype=t.dtype)),
        ("grad_fn", lambda: torch.zeros(t.shape, requires_grad=True) * 1),
        ("view of leaf", lambda: _leaf(*t.shape)[...]),
        ("view of a base that then requires grad", _view_then_requires_grad(t)),
        ("no_grad view of leaf", _no_grad_view(t)),
        ("view of a view", lambda: torch.zeros(t.shape, dtype=t.dtype)[...][...]),
        ("view", lambda: torch.zeros(t.shape, dtype=t.dtype)[...]),
        ("detach", lambda: t.detach()),
        ("Parameter", lambda: torch.nn.Parameter(torch.zeros(t.shape))),
        ("frozen Parameter", lambda: torch.nn.Parameter(torch.zeros(t.shape),
                                                        requires_grad=False)),
        ("Tensor", lambda: torch.zeros(t.shape, dtype=t.dtype)),
        ("subclass", lambda: torch.zeros(t.shape).as_subclass(Sub)),
        ("meta", lambda: torch.zeros(t.shape, dtype=t.dtype, device="meta")),
        ("inference tensor", _inference_like(t)),
        ("sparse", lambda: torch.zeros(t.shape if t.dim() else (1,)).to_sparse()),
        ("nested", _nested),
        ("symbolic meta", _symbolic_meta),
        ("not a tensor", lambda: 1.0),
    ]
    return out


def _view_then_requires_grad(t):
    def make():
        base = torch.zeros(t.shape)
        v = base[...]
        base.requires_grad_(True)
        return v
    return make


def _no_grad_view(t):
    def make():
        leaf = _leaf(*t.shape)
        with torch.no_grad():
            return leaf[...]
    return make


def _inference_like(t):
    def make():
        with torch.inference_mode():
            return torch.zeros(t.shape, dtype=t.dtype, device=t.device)
    return make


def mutations(name: str) -> list:
    """(label, mutate) pairs: an in-place change of a fresh recorded value."""
    def data(x):
        x.data = torch.zeros(x.shape, dtype=torch.float64)

    def set_(x):
        with torch.no_grad():
            x.set_(torch.zeros(x.numel() + 1, dtype=x.dtype, device=x.device))

    def resize_up(x):
        with torch.no_grad():
            x.resize_(*x.shape, 1)

    def resize_down(x):
        with torch.no_grad():
            x.resize_(x.shape[1:] if x.dim() else (1,))

    def requires_grad_off(x):
        if x.requires_grad and x.is_leaf:
            x.requires_grad_(False)

    def requires_grad_on(x):
        if not x.requires_grad and x.is_floating_point():
            x.requires_grad_(True)

    def transpose(x):
        if x.dim() >= 2:
            with torch.no_grad():
                x.t_() if x.dim() == 2 else x.transpose_(0, 1)

    return [("data", data), ("set_", set_), ("resize_ up", resize_up),
            ("resize_ down", resize_down), ("requires_grad_(False)", requires_grad_off),
            ("requires_grad_(True)", requires_grad_on), ("transpose_", transpose)]


STATES = {
    "default": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
    "exclude AutogradCPU": lambda: torch._C._ExcludeDispatchKeyGuard(
        torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU)),
    "include Negative": lambda: torch._C._IncludeDispatchKeyGuard(
        torch._C.DispatchKey.Negative),
}


@pytest.fixture
def compiled():
    guardjit.compile(unit, backend="eager")(**recorded())
    units = [u for u in plugin.units() if u.bound is not None]
    assert units, [u.reason for u in plugin.units()]
    u = units[0]
    assert u.ir.count_by_kind().get("TENSOR_MATCH", 0) >= 12, u.ir.count_by_kind()
    natives = {lvl: _core.compile(u.bound, lvl) for lvl in LEVELS}
    checks = {lvl: _core.make_guard(u.bound, c) for lvl, c in natives.items()}
    return u, natives, checks


def _agree(u, checks, fl, label, tally):
    # Dynamo's root turns torch functions off for its check and does not turn
    # them back on when an exception escapes it: restore this thread's state,
    # or later tests' GLOBAL_STATE guards see it (test_torch213_kinds.py).
    torch_function_state = torch._C._get_torch_function_state()
    try:
        expected = u.dynamo_root.check(fl)
    except RuntimeError:
        # TensorCheck::check raises for a nested tensor's strides; guardjit's
        # helper fails the check (TorchRuntime.cpp, tensorMatch).
        expected = False
        torch._C._set_torch_function_state(torch_function_state)
    got = {lvl: c(fl) for lvl, c in checks.items()}
    interp = u.bound.interpret(fl)
    assert all(g is expected for g in got.values()) and interp is expected, (
        f"{label}: dynamo={expected} native={got} interpreter={interp} "
        f"explain={u.bound.explain(fl)!r}")
    tally[expected] += 1


def test_layout_status():
    status = _core.tensor_layout_status()
    if POISONED:
        assert status != "verified" and "disagrees with torch" in status, status
    else:
        assert status == "verified", status
    assert guardjit.stats().get("tensor_match_inline", status) == status


def test_tensor_match_is_inlined_when_verified(compiled):
    u, natives, _ = compiled
    n = u.ir.count_by_kind()["TENSOR_MATCH"]
    for lvl, c in natives.items():
        stats = c.stats
        if POISONED:
            # Every TENSOR_MATCH is a helper call.
            assert stats["helpers"] >= n, (lvl, stats)
        else:
            assert stats["inlined"] >= n, (lvl, stats)


def test_replacements_agree_with_dynamo(compiled):
    u, _, checks = compiled
    tally = {True: 0, False: 0}
    base = recorded()
    for state, ctx in STATES.items():
        with ctx():
            _agree(u, checks, dict(base), f"recorded under {state}", tally)
    for name, t in base.items():
        for label, make in replacements(name, t):
            fl = dict(base)
            try:
                fl[name] = make()
            except (RuntimeError, TypeError, ValueError, NotImplementedError):
                continue
            for state, ctx in STATES.items():
                with ctx():
                    _agree(u, checks, fl, f"{name}: {label} under {state}", tally)
    assert tally[True] >= len(STATES) and tally[False] > 100, tally


def test_in_place_mutations_agree_with_dynamo(compiled):
    u, _, checks = compiled
    tally = {True: 0, False: 0}
    for name in recorded():
        for label, mutate in mutations(name):
            fl = recorded()
            try:
                mutate(fl[name])
            except (RuntimeError, TypeError, ValueError):
                continue
            for state, ctx in STATES.items():
                with ctx():
                    _agree(u, checks, fl, f"{name}: {label} under {state}", tally)
    assert tally[False] > 50, tally


POISON_FIELDS = ("impl", "key_set", "dtype", "device", "policy", "sizes", "autograd_meta",
                 "requires_grad", "grad_fn", "view_engaged", "view_base")


def _run(code: str, field: str) -> str:
    env = dict(os.environ, GUARDJIT_POISON_TENSOR_LAYOUT=field)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@pytest.mark.skipif(bool(POISONED), reason="already the poisoned run")
def test_each_poisoned_offset_fails_the_check():
    """Each offset the JIT reads is checked: moving any one of them fails the
    import-time verification, which names the field."""
    code = ("import json, torch, guardjit\nfrom guardjit import _core\n"
            "print(json.dumps(_core.tensor_layout_status()))")
    for field in POISON_FIELDS:
        status = json.loads(_run(code, field).strip().splitlines()[-1])
        assert status != "verified", field
        assert "disagrees with torch" in status, (field, status)


@pytest.mark.skipif(bool(POISONED), reason="already the poisoned run")
@pytest.mark.parametrize("field", ("sizes", "requires_grad"))
def test_poisoned_layout_keeps_the_helper_with_the_same_answers(field):
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        __file__, "-k", "not poison"],
                       env=dict(os.environ, GUARDJIT_POISON_TENSOR_LAYOUT=field),
                       capture_output=True, text=True, timeout=1200,
                       cwd=os.path.dirname(__file__))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "failed" not in r.stdout, r.stdout[-2000:]
