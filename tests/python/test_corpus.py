"""The corpus models (tests/corpus, guardjit.export.CORPUS) against Dynamo.

For each corpus entry: compile the model with guardjit as the export does,
then on the compile-time frame locals and on many mutated ones (tensor dtype,
shape, stride, requires_grad, module float/int/bool attributes, config
attributes, dict changes, submodules, grad and train mode...) the
interpreter, the native check and Dynamo's own tree must give the same
answer. Also: an object shared by several modules (a config) copied into one
holder, then restored (the object-aliasing guards).

The checked-in files must be what the current code exports: the small
entries are regenerated on every run; every entry with
``GUARDJIT_CHECK_CORPUS=1`` (a few minutes: one process per model, as
``scripts/regen-corpus.sh`` does).
"""

from __future__ import annotations

import copy
import filecmp
import os
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import guardjit
from guardjit import _core, export, models, plugin

# One corpus per torch release: the running torch's.
CORPUS_DIR = os.path.join(os.path.dirname(__file__), os.pardir, "corpus",
                          "torch-" + torch.__version__.split("+")[0])
NAMES = list(export.CORPUS)
# Re-exported on every run (small; static and dynamic shapes); every entry
# with GUARDJIT_CHECK_CORPUS=1.
QUICK_REGEN = ["mlp", "mlp-dynamic"]
FULL_REGEN = os.environ.get("GUARDJIT_CHECK_CORPUS") == "1"

# A mutation: (model, args, kwargs) -> (args, kwargs, undo), or None when it
# does not apply to this model.
Mutation = Callable[[nn.Module, tuple, dict], "tuple[tuple, dict, Callable[[], None]] | None"]


# --- frame locals of a call -------------------------------------------------------

def _bind(unit: plugin.Unit, args: tuple, kwargs: dict) -> dict | None:
    """The unit's compile-time frame locals with the call's arguments bound to
    the code's parameters (named, then ``*args``/``**kwargs``), or None if an
    argument has no place. ``args`` include the module (``self``): the frame
    may be ``forward(self, x)``, ``wrapper(self, *args, **kwargs)`` or a
    decorator's ``wrapped_func(*args, **kwargs)`` (transformers). Only for
    frame 0 (the model's own call)."""
    f_locals = dict(unit.f_locals)
    code = unit.code
    if code is None:
        return None
    varnames = code.co_varnames
    positional = list(varnames[: code.co_argcount])
    nxt = code.co_argcount + code.co_kwonlyargcount
    star = varnames[nxt] if code.co_flags & 0x04 else None  # CO_VARARGS
    if star is not None:
        nxt += 1
    starstar = varnames[nxt] if code.co_flags & 0x08 else None  # CO_VARKEYWORDS
    for name, value in zip(positional, args):
        f_locals[name] = value
    rest = tuple(args[len(positional):])
    if star is not None:
        f_locals[star] = rest
    elif rest:
        return None
    extra = {}
    for name, value in kwargs.items():
        if name in varnames[: code.co_argcount + code.co_kwonlyargcount]:
            f_locals[name] = value
        elif starstar is not None:
            extra[name] = value
        else:
            return None
    if starstar is not None:
        f_locals[starstar] = extra
    return f_locals


# --- mutations ------------------------------------------------------------------

def _from_models(mutate: Callable) -> Mutation:
    """A guardjit.models mutation ((model, args) -> (args, undo))."""
    def m(model, args, kwargs):
        new_args, undo = mutate(model, args)
        return new_args, kwargs, undo
    return m


def _attrs(model: nn.Module, kind: type) -> list[tuple[Any, str]]:
    """(object, name) of plain attributes of type ``kind`` in the modules'
    (and their configs') ``__dict__``, in module order."""
    found = []
    seen = set()
    for mod in model.modules():
        for obj in (mod, getattr(mod, "config", None)):
            if obj is None or id(obj) in seen:
                continue
            seen.add(id(obj))
            for name, value in vars(obj).items():
                if type(value) is kind and name != "training" and not name.startswith("__"):
                    found.append((obj, name))
    return found


def _set(obj: Any, name: str, value: Any) -> Callable[[], None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    return lambda: setattr(obj, name, old)


def _attr_mutation(kind: type, pick: int, change: Callable[[Any], Any]) -> Mutation:
    def m(model, args, kwargs):
        found = _attrs(model, kind)
        if not found:
            return None
        obj, name = found[pick if pick < 0 else min(pick, len(found) - 1)]
        return args, kwargs, _set(obj, name, change(getattr(obj, name)))
    return m


def _every_attr(kind: type, change: Callable[[Any], Any]) -> Mutation:
    def m(model, args, kwargs):
        found = _attrs(model, kind)
        if not found:
            return None
        undos = [_set(obj, name, change(getattr(obj, name))) for obj, name in found]
        return args, kwargs, lambda: [u() for u in reversed(undos)]
    return m


def _shared_object_copy(pick: int) -> Mutation:
    """An object held by several modules (a shared config: Dynamo guards that
    they alias) replaced in one holder by a copy with the same contents; the
    undo puts the shared object back (aliasing restored)."""
    plain = (nn.Module, torch.Tensor, int, float, bool, str, bytes, type(None), tuple, list,
             dict, set, type)

    def m(model, args, kwargs):
        holders: dict[int, tuple[Any, list]] = {}
        for mod in model.modules():
            for name, value in vars(mod).items():
                if name.startswith("_") or isinstance(value, plain) or callable(value):
                    continue
                holders.setdefault(id(value), (value, []))[1].append((mod, name))
        shared = [(v, hs) for v, hs in holders.values() if len(hs) >= 2]
        if not shared:
            return None
        value, hs = shared[0]
        mod, name = hs[pick]
        return args, kwargs, _set(mod, name, copy.copy(value))
    return m


def _new_config_attr(model, args, kwargs):
    cfg = getattr(model, "config", None)
    if cfg is None:
        return None
    cfg.guardjit_added = 1
    return args, kwargs, lambda: delattr(cfg, "guardjit_added")


def _new_submodule(model, args, kwargs):
    model.add_module("guardjit_extra", nn.Identity())
    return args, kwargs, lambda: model._modules.pop("guardjit_extra")


def _replace_leaf(model, args, kwargs):
    """The first leaf module with parameters replaced by a deep copy."""
    for parent in model.modules():
        for name, child in parent.named_children():
            if not list(child.children()) and list(child.parameters(recurse=False)):
                parent._modules[name] = copy.deepcopy(child)
                return args, kwargs, lambda: parent._modules.__setitem__(name, child)
    return None


def _param_dtype(model, args, kwargs):
    for mod in model.modules():
        for name, p in mod._parameters.items():
            if p is not None and p.is_floating_point():
                mod._parameters[name] = nn.Parameter(p.detach().double())
                return args, kwargs, lambda: mod._parameters.__setitem__(name, p)
    return None


def _param_requires_grad(model, args, kwargs):
    p = next(model.parameters())
    p.requires_grad_(not p.requires_grad)
    return args, kwargs, lambda: p.requires_grad_(not p.requires_grad)


def _kwarg(name: str, value: Any) -> Mutation:
    """An extra keyword argument (a new key in a ``**kwargs`` dict)."""
    def m(model, args, kwargs):
        return args, {**kwargs, name: value}, lambda: None
    return m


def _no_kwargs(model, args, kwargs):
    return (args, {}, lambda: None) if kwargs else None


def _extra_positional(model, args, kwargs):
    return args + (None,), kwargs, lambda: None


GENERIC: dict[str, Mutation] = {
    "first float attribute": _attr_mutation(float, 0, lambda v: v * 2 + 0.5),
    "last float attribute": _attr_mutation(float, -1, lambda v: v * 2 + 0.5),
    "first int attribute": _attr_mutation(int, 0, lambda v: v + 1),
    "first bool attribute": _attr_mutation(bool, 0, lambda v: not v),
    "last bool attribute": _attr_mutation(bool, -1, lambda v: not v),
    "first str attribute": _attr_mutation(str, 0, lambda v: v + "_x"),
    "every float attribute": _every_attr(float, lambda v: v * 2 + 0.5),
    "every bool attribute": _every_attr(bool, lambda v: not v),
    "new config attribute": _new_config_attr,
    "shared object: first holder gets a copy": _shared_object_copy(0),
    "shared object: last holder gets a copy": _shared_object_copy(-1),
    "new submodule (_modules dict)": _new_submodule,
    "leaf module replaced by a copy": _replace_leaf,
    "parameter dtype float64": _param_dtype,
    "parameter requires_grad flip": _param_requires_grad,
    "extra keyword return_dict": _kwarg("return_dict", False),
    "extra keyword output_attentions": _kwarg("output_attentions", True),
    "keyword arguments dropped": _no_kwargs,
    "extra positional argument": _extra_positional,
}


def _mutations(name: str) -> dict[str, Mutation]:
    """Generic mutations plus guardjit.models' own for the models it defines
    (those whose setup does not fit the quick size are left out)."""
    muts = {k: _from_models(v) for k, v in models._common().items()}
    own = {"decoder": models.transformer, "decoder-dynamic": models.transformer,
           "resnet-cnn": models.cnn, "mlp": models.two_input_mlp,
           "mlp-dynamic": models.two_input_mlp, "mlp-free-tensors": models.two_input_mlp}
    if name in own:
        for k, v in own[name]().mutations.items():
            muts.setdefault(k, _from_models(v))
    muts.update(GENERIC)
    return muts


# --- the checks -------------------------------------------------------------------

def _compile(name: str) -> tuple[export._Case, list[plugin.Unit]]:
    e = export.CORPUS[name]
    case = export.make_case(e.factory, quick=True)
    torch._dynamo.reset()
    plugin.clear_units()
    plugin.config.keep_units = True
    plugin.config.keep_frame_locals = True
    with torch._dynamo.config.patch(install_free_tensors=e.install_free_tensors):
        guardjit.compile(case.model, backend="eager", dynamic=e.dynamic)(
            *case.args, **case.kwargs)
    return case, plugin.units()


def _answers(u: plugin.Unit, f_locals: dict) -> tuple[bool, bool, bool]:
    return u.dynamo_root.check(f_locals), u.bound.interpret(f_locals), u.check(f_locals)


# Issue 4's differential test: every pass alone keeps the answer (JIT ==
# interpreter == Dynamo); after each of torch's filters (unsafe: the answer
# may differ from Dynamo's) the JIT still agrees with the interpreter.
SOUND_PIPELINES = ("cse", "dedup", "fold-implied", "dead-values", "order", "default")
FILTER_PIPELINES = tuple(f"{f},default" for f in (
    "skip_guard_on_inbuilt_nn_modules_unsafe", "skip_guard_on_all_nn_modules_unsafe",
    "keep_tensor_guards_unsafe", "keep_tensor_guards_unsafe<keep-parameters>",
    "keep_portable_guards_unsafe", "skip_guard_on_globals_unsafe", "skip_all_guards_unsafe"))


def _pass_variants(u: plugin.Unit) -> list[tuple[str, Any, Any]]:
    """(pipeline, JIT check, interpreter) of the recorded set after each pipeline."""
    variants = []
    for pipeline in SOUND_PIPELINES + FILTER_PIPELINES:
        ir = u.recorded_ir.copy()
        _core.run_pipeline(ir, pipeline)
        bound = _core.bind(ir)
        variants.append((pipeline, _core.make_guard(bound, _core.compile(bound)),
                         bound.interpret))
    return variants


def _pass_disagreements(variants, want: bool, f_locals: dict) -> list[str]:
    bad = []
    for pipeline, jit, interp in variants:
        got = (jit(f_locals), interp(f_locals))
        if got[0] != got[1] or (pipeline in SOUND_PIPELINES and got[0] != want):
            bad.append(f"after {pipeline}: (dynamo, jit, interpreter) = ({want}, {got[0]}, "
                       f"{got[1]})")
    return bad


@pytest.mark.parametrize("name", NAMES)
def test_interpreter_agrees_with_dynamo(name):
    case, units = _compile(name)
    assert units, "no compile unit was seen"
    for u in units:
        # The plugin converts a unit only if the interpreter and the native
        # check pass on the compile-time frame locals, as Dynamo's tree did.
        assert u.status != "dynamo", f"unit {u.name} stayed on Dynamo's path: {u.reason}"
    # Those locals may have changed since (transformers' wrappers add keys
    # to **kwargs): the same call rebuilt from its arguments passes too.
    for u in units:
        if u.name.startswith("0/"):
            f_locals = _bind(u, (case.model,) + tuple(case.args), dict(case.kwargs))
            assert _answers(u, f_locals) == (True, True, True), u.name

    variants = {u.name: _pass_variants(u) for u in units}
    disagreements, answers, skipped = [], {}, []
    for label, mutate in _mutations(name).items():
        args, kwargs = tuple(case.args), dict(case.kwargs)
        try:
            made = mutate(case.model, args, kwargs)
        except (IndexError, AttributeError, KeyError):  # a models.py mutation for 12 layers
            made = None
        if made is None:
            skipped.append(label)
            continue
        args, kwargs, undo = made
        try:
            for u in units:
                f_locals = (_bind(u, (case.model,) + args, kwargs) if u.name.startswith("0/")
                            else u.f_locals)
                if f_locals is None:
                    skipped.append(label)
                    continue
                got = _answers(u, f_locals)
                answers[f"{label} [{u.name}]"] = got[0]
                if len(set(got)) != 1:
                    disagreements.append(f"{label} [{u.name}]: (dynamo, interpreter, native) "
                                         f"= {got}")
                disagreements += [f"{label} [{u.name}] {d}" for d in
                                  _pass_disagreements(variants[u.name], got[0], f_locals)]
        finally:
            undo()
    assert not disagreements, disagreements
    # Enough scenarios ran, and both answers are exercised.
    assert len(answers) >= 15, (answers, skipped)
    assert any(answers.values()), answers
    assert sum(not a for a in answers.values()) >= len(answers) // 3, answers


def test_bind_fills_star_args_and_kwargs():
    def wrapper(self, *args, **kwargs):
        return args, kwargs
    u = plugin.Unit(name="0/0", status="native", guards=0, code=wrapper.__code__,
                    f_locals={"self": 1, "args": ("old",), "kwargs": {"a": 1}})
    assert _bind(u, (1, "x", "y"), {"k": 2}) == {"self": 1, "args": ("x", "y"),
                                                 "kwargs": {"k": 2}}

    def wrapped_func(*args, **kwargs):
        return args, kwargs
    u = plugin.Unit(name="0/0", status="native", guards=0, code=wrapped_func.__code__,
                    f_locals={"args": (1, "old"), "kwargs": {}, "func": len})
    assert _bind(u, (1, "x"), {}) == {"args": (1, "x"), "kwargs": {}, "func": len}

    def forward(self, x, y=None):
        return x
    u = plugin.Unit(name="0/0", status="native", guards=0, code=forward.__code__,
                    f_locals={"self": 1, "x": "old", "y": None})
    assert _bind(u, (1, "new"), {"y": 3}) == {"self": 1, "x": "new", "y": 3}
    assert _bind(u, (1, "new"), {"z": 3}) is None
    assert _bind(u, (1, "new", 2, 3), {}) is None


# --- the files are up to date --------------------------------------------------------

def _regen(names: list[str], out: str) -> None:
    # One child process per entry, as scripts/regen-corpus.sh runs it.
    assert export.export_corpus(names, out)


def _same_files(names: list[str], out: str) -> None:
    expected = sorted(f for f in os.listdir(CORPUS_DIR)
                      if f.endswith(".gir") and f.split(".")[0] in names)
    got = sorted(os.listdir(out))
    assert got == expected, "the corpus files differ from an export: run scripts/regen-corpus.sh"
    stale = [f for f in got if not filecmp.cmp(os.path.join(out, f),
                                               os.path.join(CORPUS_DIR, f), shallow=False)]
    assert not stale, f"{stale} differ from an export: run scripts/regen-corpus.sh"


def test_corpus_has_every_entry_and_six_models():
    stems = {f.split(".")[0] for f in os.listdir(CORPUS_DIR) if f.endswith(".gir")}
    assert stems == set(NAMES), "run scripts/regen-corpus.sh"
    assert len({export.CORPUS[n].factory for n in NAMES}) >= 6


def test_small_corpus_files_are_up_to_date(tmp_path):
    _regen(QUICK_REGEN, str(tmp_path))
    _same_files(QUICK_REGEN, str(tmp_path))


@pytest.mark.slow
@pytest.mark.skipif(not FULL_REGEN, reason="a few minutes; set GUARDJIT_CHECK_CORPUS=1")
def test_every_corpus_file_is_up_to_date(tmp_path):
    _regen(["all"], str(tmp_path))
    _same_files(NAMES, str(tmp_path))
