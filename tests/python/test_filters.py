"""guardjit's filter passes keep exactly the guards torch keeps.

For each corpus model and each of torch's six guard filters
(torch/compiler/__init__.py):

* torch's kept set: the model compiled with
  ``options={"guard_filter_fn": torch.compiler.<filter>}``; Dynamo filters
  the GuardFilterEntry list and rebuilds the tree from the kept guards
  (CheckFunctionManager.__init__), and the recorder records that tree;
* guardjit's: the unfiltered recording of the same model with the filter
  pass of the same name run on it (``_core.run_pipeline``).

Both are compared id-free (``guardjit.girtext.guard_view``): the same checks
(kind, operand sources, payload, source, location, verbose code part), the
same Dynamo guard (guard_type, name) behind each, and the same accessor reads.

CI runs a representative subset (3 transformers architectures and 3 others);
``GUARDJIT_SLOW_TESTS=1`` runs the whole corpus.
"""

from __future__ import annotations

import pytest
import torch

import guardjit
from guardjit import _core, girtext, plugin
from guardjit.bench.corpus import CORPUS

FILTERS = (
    "skip_guard_on_inbuilt_nn_modules_unsafe",
    "skip_guard_on_all_nn_modules_unsafe",
    "keep_tensor_guards_unsafe",
    "keep_portable_guards_unsafe",
    "skip_guard_on_globals_unsafe",
    "skip_all_guards_unsafe",
)
CI_MODELS = ("gpt2", "bert", "llama", "resnet-cnn", "mlp", "decoder")
SLOW_MODELS = tuple(m for m in CORPUS if m not in CI_MODELS)

_cases: dict[str, object] = {}
# (model, filter) -> units. The units (their bound sets hold the strong
# objects) and the case (the model, whose objects the IR borrows) stay alive
# while the recordings are used.
_recordings: dict[tuple[str, str | None], list] = {}


def _record(model: str, filter_name: str | None, guard_filter_fn=None) -> list:
    """The recorded (unoptimized) IR of every unit of one compile of the
    model (one model object per corpus entry, shared by all its compiles)."""
    key = (model, filter_name)
    if key not in _recordings:
        case = _cases.setdefault(model, CORPUS[model](True))
        torch._dynamo.reset()
        plugin.clear_units()
        fn = guard_filter_fn or (getattr(torch.compiler, filter_name) if filter_name else None)
        kwargs = {"options": {"guard_filter_fn": fn}} if fn else {}
        compiled = guardjit.compile(case.model, backend="eager", **kwargs)
        args, kw = case.inputs()
        with torch.no_grad():
            compiled(*args, **kw)
        units = plugin.units()
        assert units, "no compile unit"
        assert all(u.recorded_ir is not None for u in units), [u.reason for u in units]
        _recordings[key] = units
        plugin.clear_units()
        torch._dynamo.reset()
    return [u.recorded_ir for u in _recordings[key]]


def _same(unfiltered, kept, pipeline: str) -> None:
    ours = unfiltered.copy()
    _core.run_pipeline(ours, pipeline)
    g_ours, v_ours = girtext.guard_view(ours.print())
    g_torch, v_torch = girtext.guard_view(kept.print())
    only_ours = sorted(set(g_ours) - set(g_torch))
    only_torch = sorted(set(g_torch) - set(g_ours))
    assert not only_ours and not only_torch, (only_ours[:5], only_torch[:5])
    origins = {k: (g_ours[k], g_torch[k]) for k in g_ours if g_ours[k] != g_torch[k]}
    assert not origins, list(origins.items())[:5]
    assert v_ours == v_torch, girtext.difference(v_ours, v_torch)


def _check(model: str, filter_name: str) -> None:
    base = _record(model, None)
    torch_kept = _record(model, filter_name)
    assert len(base) == len(torch_kept)
    for unfiltered, kept in zip(base, torch_kept):
        _same(unfiltered, kept, filter_name)


@pytest.mark.parametrize("filter_name", FILTERS)
@pytest.mark.parametrize("model", CI_MODELS)
def test_filter_pass_keeps_torch_set(model, filter_name):
    _check(model, filter_name)


@pytest.mark.slow
@pytest.mark.parametrize("filter_name", FILTERS)
@pytest.mark.parametrize("model", SLOW_MODELS)
def test_filter_pass_keeps_torch_set_full_corpus(model, filter_name):
    _check(model, filter_name)


def test_keep_parameters_option():
    """keep_tensor_guards_unsafe(entries, keep_parameters=True)."""
    from functools import partial

    f = partial(torch.compiler.keep_tensor_guards_unsafe, keep_parameters=True)
    (kept,) = _record("mlp", "keep_tensor_guards_unsafe<keep-parameters>", f)
    (unfiltered,) = _record("mlp", None)
    _same(unfiltered, kept, "keep_tensor_guards_unsafe<keep-parameters>")
    assert kept.count_by_kind()["TENSOR_MATCH"] > 2  # the parameters too
