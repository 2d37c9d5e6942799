"""Guard sets compiled with ``torch._dynamo.config.install_free_tensors=True``
(free tensors such as parameters become graph inputs instead of constants)
are converted natively and agree with Dynamo's tree, alone and with the
combination the "reducing guard overhead" guide recommends
(``install_free_tensors`` + ``skip_guard_on_all_nn_modules_unsafe``).
"""

from __future__ import annotations

import pytest
import torch

import guardjit
from guardjit import models, plugin
from guardjit.lab import demo

COMBOS = {
    "install_free_tensors": {},
    "install_free_tensors+skip_guard_on_all_nn_modules_unsafe": {
        "options": {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}},
}


def _compile(case, kwargs):
    # A copy of the options dict: torch.compile pops guard_filter_fn from the
    # one it is given, so COMBOS' would be unfiltered from its second use on.
    kwargs = {k: dict(v) if k == "options" else v for k, v in kwargs.items()}
    with torch._dynamo.config.patch(install_free_tensors=True):
        guardjit.compile(case.model, backend="eager", **kwargs)(*case.make_input())
    units = plugin.units()
    assert units and all(u.status == "native" for u in units), [u.reason for u in units]
    return units


@pytest.mark.parametrize("combo", sorted(COMBOS))
@pytest.mark.parametrize("model", ["cnn", "two-input-mlp"])
def test_free_tensors_native_and_agree(model, combo):
    case = models.DEFAULT_MODELS[model]()
    units = _compile(case, COMBOS[combo])
    plan = [("original", None)] + list(case.mutations.items())
    rejected, bad = 0, []
    for label, mutate in plan:
        args = case.make_input()
        undo = lambda: None  # noqa: E731
        if mutate is not None:
            args, undo = mutate(case.model, args)
        try:
            for u in units:
                fl = demo._frame_locals_for(u, args)
                want = u.dynamo_root.check(fl)
                got = (u.native_root.check(fl), u.check(fl), u.bound.interpret(fl))
                rejected += not want
                if got != (want,) * 3:
                    bad.append((label, want, got))
        finally:
            undo()
    assert not bad
    assert rejected >= len(plan) // 2


def test_free_tensors_guard_parameters_as_inputs():
    """With install_free_tensors the parameters are graph inputs: Dynamo
    guards each with TENSOR_MATCH, and the recorded IR has them all."""
    case = models.two_input_mlp()
    (unit,) = _compile(case, {})
    n_params = sum(1 for _ in case.model.parameters())
    assert unit.recorded_ir.count_by_kind()["TENSOR_MATCH"] >= n_params + 2
    # The guide's combination keeps what guards the inputs: the parameters'
    # TENSOR_MATCH guards go with the rest of the module's (their sources
    # are under L['self'], unspecialized nn-module sources, though the
    # parameters are graph inputs), as in plain torch's filtered tree.
    torch._dynamo.reset()
    plugin.clear_units()
    (filtered,) = _compile(case, COMBOS["install_free_tensors+skip_guard_on_all_nn_modules_unsafe"])
    assert filtered.guards < unit.guards
    assert filtered.recorded_ir.count_by_kind()["TENSOR_MATCH"] == 2  # x and y
    x, y = case.make_input()
    fl = dict(filtered.f_locals, x=x.double(), y=y)
    assert filtered.dynamo_root.check(fl) is False
    assert filtered.check(fl) is False
