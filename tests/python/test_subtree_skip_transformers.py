"""Adversarial mutations against subtree skipping on a transformers model
(issue 26): the pattern of test_subtree_skip_adversarial.py, on a tiny
LlamaForCausalLM (2 layers, hidden 64, 4 heads, 2 KV heads, vocabulary 512,
use_cache=False, eval, backend eager, no_grad).

Each test warms up until skipping answers calls (Pair.warm asserts the skip
hits grew), mutates the guardjit, plain torch and eager copies the same way
and calls again: guardjit must return eager's result and recompile whenever
plain torch does (where plain torch 2.13 serves a stale graph, guardjit must
give plain torch's answer). The model's guards reach it through transformers'
output-capturing wrappers (`def wrapper(self, *args, **kwargs)`), so the
model is `L['args'][0]` and its config's reads go through
PreTrainedConfig.__getattribute__ and its `attribute_map`.
"""

from __future__ import annotations

import copy

import pytest
import torch

import guardjit
from guardjit import plugin

# The adversarial file's helpers (tests/python is on sys.path: pytest's
# rootdir-relative "prepend" import of this directory, which has no
# __init__.py). Its autouse fixture raises the recompile limit.
from test_subtree_skip_adversarial import Pair, _close, _hits, _room_for_both_sides  # noqa: F401

transformers = pytest.importorskip("transformers")

VOCAB = 512


def _config(**kw):
    from transformers import LlamaConfig

    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                use_cache=False)
    base.update(kw)
    return LlamaConfig(**base)


def _llama(**kw):
    from transformers import LlamaForCausalLM

    transformers.logging.set_verbosity_error()
    return LlamaForCausalLM(_config(**kw)).eval()


def _ids(seq: int = 8, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (1, seq), generator=g)


def _logits(out):
    """What the comparison sees: the logits and, when returned, the attentions
    (a past_key_values cache object has no tensor comparison)."""
    if isinstance(out, tuple):
        return out[0]
    extra = tuple(tuple(t) for t in (out.attentions, out.hidden_states) if t is not None)
    return (out.logits, extra) if extra else out.logits


class HFPair(Pair):
    """Pair on a transformers model: compares logits (and attentions), and
    calls with input_ids positionally or by keyword."""

    def __init__(self, make=_llama, x=None, kw: bool = False) -> None:
        super().__init__(make, _ids() if x is None else x)
        self.kw = kw

    def outputs(self, x=None):
        x = self.x if x is None else x
        call = (lambda f: f(input_ids=x)) if self.kw else (lambda f: f(x))
        want = _logits(call(self.eager))
        return want, _logits(call(self.gj)), _logits(call(self.pt))

    def check(self, x=None, torch_stale: bool = False):
        want, got_gj, got_pt = self.outputs(x)
        says = (f"guardjit==eager {_close(got_gj, want)}, torch==eager {_close(got_pt, want)}, "
                f"guardjit==torch {_close(got_gj, got_pt)}, counts {self.counts}")
        if torch_stale:
            assert not _close(got_pt, want), "plain torch is no longer stale here"
            assert _close(got_gj, got_pt), says
        else:
            assert _close(got_gj, want) and _close(got_pt, want), says
        return got_gj


def _restore_attribute_map(saved):
    from transformers import LlamaConfig

    amap = LlamaConfig.attribute_map
    amap.clear()
    amap.update(saved)


# --- skipping engages at all ----------------------------------------------


def test_skipping_engages_on_llama():
    pair = HFPair()
    pair.warm(calls=4)
    st = guardjit.stats()["subtree_skip"]
    assert st["units"] >= 1 and st["hits"] >= 4, st
    assert st["implied_guards"] > st["residual_guards"], st
    assert pair.counts == (1, 1)


# --- the config ------------------------------------------------------------


def test_config_attributes_changed_in_place():
    pair = HFPair()
    pair.warm()
    pair.step(lambda m: setattr(m.config, "_attn_implementation", "eager"), recompiles=True)
    pair.warm()
    pair.step(lambda m: setattr(m.config, "output_attentions", True), recompiles=True)
    # Back to earlier states: the counts must agree (torch 2.13 compiles
    # (eager, no attentions) again here: 2 frames, like guardjit).
    pair.step(lambda m: setattr(m.config, "output_attentions", False))
    pair.step(lambda m: setattr(m.config, "_attn_implementation", "sdpa"))
    pair.warm()  # skipping answers again
    pair.step(lambda m: setattr(m.config, "output_hidden_states", True), recompiles=True)


def test_use_cache_switched_on_the_config():
    pair = HFPair()
    pair.warm()
    pair.step(lambda m: setattr(m.config, "use_cache", True), recompiles=True)
    pair.step(lambda m: setattr(m.config, "use_cache", False), recompiles=False)


def test_layer_config_made_distinct_then_changed():
    pair = HFPair()
    assert pair.eager.model.layers[0].self_attn.config is pair.eager.config

    def own_config(m):
        attn = m.model.layers[1].self_attn
        attn.config = copy.deepcopy(attn.config)

    pair.warm()
    pair.step(own_config)  # a copy with the same values
    pair.warm()
    # The shared config first (the mask is then built for eager attention;
    # layer 1 alone on eager with an sdpa-style mask would differ between
    # eager and *any* compile: transformers skips the causal mask in eager
    # only), then layer 1's own copy.
    pair.step(lambda m: setattr(m.config, "_attn_implementation", "eager"), recompiles=True)
    pair.warm()
    pair.step(lambda m: setattr(m.model.layers[1].self_attn.config, "_attn_implementation",
                                "eager"), recompiles=True)
    pair.warm()
    pair.step(lambda m: setattr(m.model.layers[1].self_attn.config, "attention_dropout", 0.5))


def test_config_gains_an_attribute_a_guard_checks_absent():
    """`not hasattr(L['args'][0].config, 'is_causal')` is implied by the
    config's __dict__ tag: an instance attribute breaks it."""
    pair = HFPair()
    pair.warm()
    pair.step(lambda m: setattr(m.config, "is_causal", False), recompiles=True)
    pair.step(lambda m: delattr(m.config, "is_causal"), recompiles=False)


def test_attribute_map_edited_in_place():
    """The class's attribute_map maps a name the guards check absent to a
    present attribute: no __dict__ and no type version changes."""
    from transformers import LlamaConfig

    saved = dict(LlamaConfig.attribute_map)
    pair = HFPair()
    pair.warm()
    try:
        pair.step(lambda m: type(m.config).attribute_map.__setitem__("is_causal", "use_cache"),
                  recompiles=True)
    finally:
        _restore_attribute_map(saved)
    pair.step(lambda m: None, recompiles=False)  # the first entry again
    pair.warm()
    try:
        # A name the config does have, now read through the map.
        pair.step(lambda m: type(m.config).attribute_map.__setitem__("output_attentions",
                                                                     "use_cache"))
    finally:
        _restore_attribute_map(saved)


def test_config_replaced_class_swapped_and_heterogeneity_spec_set():
    from transformers import LlamaConfig

    class SubConfig(LlamaConfig):
        pass

    pair = HFPair()
    pair.warm()

    def replace(m):
        cfg = copy.deepcopy(m.config)
        m.config = m.model.config = cfg
        for layer in m.model.layers:
            layer.self_attn.config = cfg

    pair.step(replace)
    pair.warm()
    pair.step(lambda m: setattr(m.config, "output_attentions", False))  # the same value
    pair.step(lambda m: setattr(m.config, "_attn_implementation", "eager"), recompiles=True)
    pair.warm()
    pair.step(lambda m: setattr(m.config, "__class__", SubConfig), recompiles=True)
    pair.warm()

    class Spec:
        per_layer_attributes = frozenset({"hidden_size"})
        per_layer_overrides: dict = {}

    # (guardjit records no snapshot while a spec is set -- record_failures
    # grows -- and answers by the full check: no warm-up here.)
    pair.step(lambda m: m.config.__dict__.__setitem__("_heterogeneity_spec", Spec()))

    class Strict:  # use_cache is read on the global config: eager raises
        per_layer_attributes = frozenset({"use_cache"})
        per_layer_overrides: dict = {}

    before = pair.counts
    pair.mutate(lambda m: m.config.__dict__.__setitem__("_heterogeneity_spec", Strict()))
    from transformers.integrations.heterogeneity.configuration_utils import (
        AmbiguousGlobalPerLayerAttributeError,
    )

    with torch.no_grad():
        for side in (pair.eager, pair.gj, pair.pt):
            with pytest.raises(AmbiguousGlobalPerLayerAttributeError):
                side(pair.x)
    gj, pt = pair.counts
    assert gj - before[0] == pt - before[1], (before, pair.counts)
    pair.step(lambda m: m.config.__dict__.pop("_heterogeneity_spec"))
    pair.warm()  # skipping answers again once the spec is gone


# --- parameters and modules ------------------------------------------------


def test_parameter_requires_grad_and_dtype():
    pair = HFPair()
    pair.warm()
    pair.warm(ctx=torch.enable_grad)
    pair.step(lambda m: m.model.layers[0].mlp.up_proj.weight.requires_grad_(False),
              ctx=torch.enable_grad, recompiles=True)

    def to_double(m):  # the same Parameter objects, the same dicts
        for p in m.parameters():
            p.data = p.data.double()

    pair.step(to_double, recompiles=True)


def test_layers_replaced_appended_popped_and_trained():
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    pair = HFPair()
    pair.warm()

    def replace(m):
        torch.manual_seed(7)
        m.model.layers[0] = LlamaDecoderLayer(m.config, 0).eval()

    pair.step(replace)
    pair.warm()

    def append(m):
        torch.manual_seed(8)
        m.model.layers.append(LlamaDecoderLayer(m.config, 2).eval())

    pair.step(append, recompiles=True)
    pair.step(lambda m: m.model.layers.__delitem__(-1))
    pair.warm()
    pair.step(lambda m: m.model.layers[1].train(), recompiles=True)


def test_module_attributes_changed():
    """Plain attributes of an attention module (instance __dict__ values the
    sdpa path reads: is_causal, scaling)."""
    pair = HFPair()
    pair.warm()
    # Not staleness but transformers itself: under compile the sdpa path
    # always materialises the causal mask (eager passes None and uses
    # module.is_causal), so any compile of this model ignores is_causal and
    # differs from eager; guardjit must give plain torch's answer.
    pair.step(lambda m: setattr(m.model.layers[0].self_attn, "is_causal", False),
              torch_stale=True, recompiles=False)
    pair.step(lambda m: setattr(m.model.layers[0].self_attn, "is_causal", True),
              recompiles=False)
    pair.warm()
    pair.step(lambda m: setattr(m.model.layers[1].self_attn, "scaling", 0.5), recompiles=True)


# --- globals ---------------------------------------------------------------


def test_attention_function_registry_entry_replaced():
    from transformers.modeling_utils import AttentionInterface

    registry = AttentionInterface._global_mapping
    orig = registry["sdpa"]

    def doubled_sdpa(*args, **kwargs):
        out, w = orig(*args, **kwargs)
        return out * 2.0, w

    pair = HFPair()
    pair.warm()
    try:
        pair.step(lambda m: registry.__setitem__("sdpa", doubled_sdpa), recompiles=True)
    finally:
        registry["sdpa"] = orig
    pair.step(lambda m: None, recompiles=False)


# --- inputs: *args and **kwargs items are anchors --------------------------


@pytest.mark.parametrize("kw", [False, True], ids=["args", "kwargs"])
def test_fresh_inputs_every_call(kw):
    pair = HFPair(kw=kw)
    pair.warm()
    with torch.no_grad():
        # Dynamo read the warm-up input's __dict__ (materialising it); a
        # fresh tensor has none, so the first one re-records once.
        pair.check(_ids(seed=1234))
    before = _hits()
    with torch.no_grad():
        for seed in range(2, 6):
            pair.check(_ids(seed=seed))
    assert _hits() - before >= 4
    assert pair.counts == (1, 1)
    # Another length: plain torch recompiles (automatic dynamic), so must guardjit.
    pair.step(lambda m: None, x=_ids(seq=12, seed=9), recompiles=True)
    pair.step(lambda m: None, x=_ids(seq=5, seed=10))


def test_positional_and_keyword_calls_alternate():
    """Answers and compile counts only: two entries, `L['args'][1]` vs
    `L['kwargs']['input_ids']` (no skip hits here today: see
    test_alternating_call_styles_keep_skipping)."""
    pair = HFPair()
    pair.warm()
    kw = HFPair.__new__(HFPair)
    kw.__dict__.update(pair.__dict__)
    kw.kw = True
    before = pair.counts
    with torch.no_grad():
        for seed in range(3):
            kw.check(_ids(seed=20 + seed))
            pair.check(_ids(seed=30 + seed))
    gj, pt = pair.counts
    assert gj - before[0] == pt - before[1]


def test_fresh_input_marked_dynamic():
    """An unmarked input's DIMENSION_DYNAMIC_MARKING guard is implied by its
    type and __dict__ steps: a fresh input marked dynamic must still be seen."""
    pair = HFPair()
    pair.warm()
    with torch.no_grad():
        pair.check(_ids(seed=77))
        before = _hits()
        pair.check(_ids(seed=78))
    assert _hits() > before

    x = _ids(seed=79)
    torch._dynamo.mark_dynamic(x, 1)
    pair.step(lambda m: None, x=x, recompiles=True)


def test_alternating_call_styles_keep_skipping():
    from torch._dynamo.testing import CompileCounter

    count = CompileCounter()
    gj = guardjit.compile(_llama(), backend=count)
    with torch.no_grad():
        for i in range(3):
            gj(_ids(seed=i))
            gj(input_ids=_ids(seed=i))
            plugin.wait_for_tier_up()
        assert count.frame_count == 2
        before = _hits()
        for i in range(4):
            gj(input_ids=_ids(seed=40 + i))
            gj(_ids(seed=50 + i))
    assert _hits() - before >= 6
