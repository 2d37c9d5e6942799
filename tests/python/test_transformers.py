"""Real `transformers` models (built from tiny configs, no downloads) run on
guardjit's native guards and agree with Dynamo's tree.

GPT-2, BERT and Llama reach accessors (closures of nested functions, function
defaults, Python lambdas, weak globals) and leaf guards (FLOAT_IS_NAN,
DICT_VERSION) that plain nn.Modules do not. Every compile unit must be native,
and for every mutation Dynamo's RootGuardManager, guardjit's replacement root
and the interpreter must give the same answer on the compile-time frame locals.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import guardjit
from guardjit import plugin

transformers = pytest.importorskip("transformers")


def _gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=128)
    return transformers.GPT2LMHeadModel(cfg).eval(), "layer_norm_epsilon"


def _bert():
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=128, vocab_size=128)
    return transformers.BertModel(cfg).eval(), "layer_norm_eps"


def _llama():
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, vocab_size=128)
    return transformers.LlamaForCausalLM(cfg).eval(), "rms_norm_eps"


MODELS = {"gpt2": _gpt2, "bert": _bert, "llama": _llama}


def _compile(name):
    torch.manual_seed(0)
    model, eps_attr = MODELS[name]()
    ids = torch.randint(0, 128, (1, 8))
    # Default grad mode, like the checks below (GLOBAL_STATE guards it).
    guardjit.compile(model, backend="eager")(ids)
    units = plugin.units()
    assert units, "no compile unit was seen"
    return model, eps_attr, units


def _as_called(f_locals):
    """The frame locals as the caller passed them. transformers' output
    wrappers (utils/generic.py) store `use_cache` into the `kwargs` dict
    after Dynamo read it, which mutates the saved compile-time dict."""
    out = dict(f_locals)
    kwargs = out.get("kwargs")
    if isinstance(kwargs, dict) and "use_cache" in kwargs:
        out["kwargs"] = {k: v for k, v in kwargs.items() if k != "use_cache"}
    return out


def _retensor(f_locals, make):
    """A copy of the frame locals with every plain (non-parameter) tensor
    replaced by make(t)."""
    out = dict(f_locals)
    for k, v in f_locals.items():
        if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter):
            out[k] = make(v)
    return out


@contextlib.contextmanager
def _set_attr(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextlib.contextmanager
def _training(model):
    model.train()
    try:
        yield
    finally:
        model.eval()


@contextlib.contextmanager
def _flip_requires_grad(model):
    p = next(model.parameters())
    p.requires_grad_(not p.requires_grad)
    try:
        yield
    finally:
        p.requires_grad_(not p.requires_grad)


def _scenarios(model, eps_attr):
    same = contextlib.nullcontext
    return [
        ("compile-time locals", same, lambda d: d),
        ("input shape", same, lambda d: _retensor(
            d, lambda t: torch.zeros(*t.shape[:-1], t.shape[-1] + 1, dtype=t.dtype)
            if t.dim() else t + 1)),
        ("input dtype", same, lambda d: _retensor(
            d, lambda t: t.to(torch.float64 if not t.is_floating_point() else torch.float16))),
        ("config float", lambda: _set_attr(model.config, eps_attr,
                                           getattr(model.config, eps_attr) * 2), lambda d: d),
        ("requires_grad", lambda: _flip_requires_grad(model), lambda d: d),
        ("train()", lambda: _training(model), lambda d: d),
    ]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_transformers_units_are_native_and_agree(name):
    model, eps_attr, units = _compile(name)
    for u in units:
        assert u.status == "native", f"{name}: {u.reason}"
        assert u.f_locals is not None
    disagreements, answers = [], {}
    for label, ctx, rewrite in _scenarios(model, eps_attr):
        with ctx():
            for i, u in enumerate(units):
                d = rewrite(_as_called(u.f_locals))
                expected = u.dynamo_root.check(d)
                got = (u.native_root.check(d), u.bound.interpret(d))
                answers[(label, i)] = expected
                if got != (expected, expected):
                    disagreements.append(f"unit {i} {label}: dynamo={expected} "
                                         f"(native root, interpreter)={got}")
    assert not disagreements, "\n".join(disagreements)
    # The compile-time locals pass, and at least one mutation fails: the
    # agreement is not vacuous.
    assert all(answers[("compile-time locals", i)] for i in range(len(units)))
    assert not all(answers.values())
