"""The benchmark corpus: real model architectures built locally, no downloads.

Every entry is a factory ``(quick: bool) -> BenchCase``. ``quick`` shrinks the
model (fewer layers) so that ``--quick`` runs in CI time; the architecture
and the kinds of guards stay the same.

* ``transformers`` architectures from tiny configs (random weights, eval
  mode, ``use_cache=False`` so the guards do not depend on a cache object):
  GPT-2, BERT, Llama, Mistral, T5; and ``qwen3-36L``, a Qwen3 model with
  Qwen3-8B's depth (36 layers; 2 in quick mode) and tiny widths: the guard
  structure of the real model.
* The ResNet-style CNN, the two-input MLP and the 12-layer decoder of
  :mod:`guardjit.models`.
* ``deep-decoder``: a stack of identical decoder layers (32; 4 in quick
  mode) holding float attributes and a shared config object, the shape of
  model whose Dynamo cache lookup reached milliseconds.
* ``param-heavy``: many small blocks, each with parameters and buffers
  (several hundred tensors, one TENSOR_MATCH each).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch
from torch import nn

from guardjit import models as gj_models

VOCAB = 512


@dataclasses.dataclass
class BenchCase:
    name: str
    model: nn.Module
    make_input: Callable[[], tuple]
    kwargs: dict = dataclasses.field(default_factory=dict)  # keyword inputs of a call
    description: str = ""
    # Repeated layers (blocks) of the model, the divisor of the bench's
    # lookup_per_layer_us; None where nothing repeats.
    layers: int | None = None

    def inputs(self) -> tuple[tuple, dict]:
        return self.make_input(), dict(self.kwargs)


def _ids(batch: int = 2, seq: int = 16) -> Callable[[], tuple]:
    def make() -> tuple:
        g = torch.Generator().manual_seed(0)
        return (torch.randint(0, VOCAB, (batch, seq), generator=g),)
    return make


# --- transformers architectures ------------------------------------------------

def _hf_quiet() -> None:
    import transformers

    transformers.logging.set_verbosity_error()


def gpt2(quick: bool = False) -> BenchCase:
    _hf_quiet()
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=1 if quick else 4,
                     n_head=4, use_cache=False)
    return BenchCase("gpt2", GPT2LMHeadModel(cfg).eval(), _ids(),
                     description=f"transformers GPT2LMHeadModel, {cfg.n_layer} layers, d=64",
                     layers=cfg.n_layer)


def bert(quick: bool = False) -> BenchCase:
    _hf_quiet()
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=1 if quick else 4,
                     num_attention_heads=4, intermediate_size=128, max_position_embeddings=64)
    return BenchCase("bert", BertModel(cfg).eval(), _ids(),
                     description=f"transformers BertModel, {cfg.num_hidden_layers} layers, d=64",
                     layers=cfg.num_hidden_layers)


def llama(quick: bool = False) -> BenchCase:
    _hf_quiet()
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=1 if quick else 4, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, use_cache=False)
    return BenchCase("llama", LlamaForCausalLM(cfg).eval(), _ids(),
                     description=f"transformers LlamaForCausalLM, {cfg.num_hidden_layers} layers, "
                                 "d=64, GQA", layers=cfg.num_hidden_layers)


def mistral(quick: bool = False) -> BenchCase:
    _hf_quiet()
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                        num_hidden_layers=1 if quick else 4, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=64, sliding_window=32,
                        use_cache=False)
    return BenchCase("mistral", MistralForCausalLM(cfg).eval(), _ids(),
                     description=f"transformers MistralForCausalLM, {cfg.num_hidden_layers} "
                                 "layers, d=64, sliding window", layers=cfg.num_hidden_layers)


def t5(quick: bool = False) -> BenchCase:
    _hf_quiet()
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    layers = 1 if quick else 3
    cfg = T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=layers,
                   num_decoder_layers=layers, num_heads=4, use_cache=False)
    g = torch.Generator().manual_seed(0)
    enc = torch.randint(0, VOCAB, (2, 16), generator=g)
    dec = torch.randint(0, VOCAB, (2, 8), generator=g)
    return BenchCase("t5", T5ForConditionalGeneration(cfg).eval(), lambda: (enc,),
                     kwargs={"decoder_input_ids": dec},
                     description=f"transformers T5ForConditionalGeneration, {layers}+{layers} "
                                 "layers, d=64", layers=2 * layers)


QWEN3_8B_LAYERS = 36  # Qwen3-8B's num_hidden_layers


def qwen3_config(layers: int, use_cache: bool = False):
    """A Qwen3 config with ``layers`` layers and tiny widths (hidden 64, 4
    heads, 2 KV heads, intermediate 128, vocabulary 512)."""
    _hf_quiet()
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, max_position_embeddings=256, use_cache=use_cache)


def qwen3(quick: bool = False) -> BenchCase:
    """Qwen3-8B's depth at tiny widths, random weights: the guard structure of
    the model users compile (issue 26)."""
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = qwen3_config(2 if quick else QWEN3_8B_LAYERS)
    return BenchCase(f"qwen3-{cfg.num_hidden_layers}L", Qwen3ForCausalLM(cfg).eval(), _ids(),
                     description=f"transformers Qwen3ForCausalLM, {cfg.num_hidden_layers} layers "
                                 "(Qwen3-8B's depth at full size), d=64, GQA",
                     layers=cfg.num_hidden_layers)


# --- guardjit.models -----------------------------------------------------------

def _from_models(case: gj_models.ModelCase, name: str, description: str,
                 layers: int | None = None) -> BenchCase:
    return BenchCase(name, case.model, case.make_input, description=description, layers=layers)


def cnn(quick: bool = False) -> BenchCase:
    return _from_models(gj_models.cnn(), "resnet-cnn",
                        "ResNet-style CNN (guardjit.models.SmallCNN): 3 residual blocks, "
                        "BatchNorm")


def mlp(quick: bool = False) -> BenchCase:
    return _from_models(gj_models.two_input_mlp(), "mlp",
                        "two-input MLP (guardjit.models.TwoInputMLP)")


def transformer(quick: bool = False) -> BenchCase:
    layers = 2 if quick else 12
    return _from_models(gj_models.transformer(layers), f"decoder-{layers}L",
                        f"decoder-only transformer (guardjit.models), {layers} layers, "
                        "a global and float attributes", layers)


# --- a deep stack of identical layers --------------------------------------------

class StackConfig:
    """A plain config object shared by every layer (as in model zoos)."""

    def __init__(self, d: int, heads: int, layers: int) -> None:
        self.hidden_size = d
        self.num_heads = heads
        self.num_layers = layers
        self.rms_eps = 1e-6
        self.attn_softcap = 50.0
        self.rope_theta = 10000.0
        self.use_gate = True


class RMSNorm(nn.Module):
    def __init__(self, config: StackConfig) -> None:
        super().__init__()
        self.config = config
        self.weight = nn.Parameter(torch.ones(config.hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.config.rms_eps) * self.weight


class StackLayer(nn.Module):
    def __init__(self, config: StackConfig, index: int) -> None:
        super().__init__()
        d = config.hidden_size
        self.config = config
        self.index = index
        self.norm1 = RMSNorm(config)
        self.norm2 = RMSNorm(config)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(d, 2 * d, bias=False)
        self.down = nn.Linear(2 * d, d, bias=False)
        # float attributes Dynamo guards on (one per layer)
        self.attn_scale = 1.0 / math.sqrt(d // config.num_heads)
        self.residual_scale = 1.0 / math.sqrt(2.0 * config.num_layers)
        self.layer_scale = 1.0 - 0.5 * index / config.num_layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        b, t, d = x.shape
        h = self.norm1(x)
        q, k, v = self.qkv(h).view(b, t, 3, cfg.num_heads, d // cfg.num_heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(-2, -1)) * self.attn_scale
        s = cfg.attn_softcap * torch.tanh(s / cfg.attn_softcap)
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.residual_scale * self.out(a)
        g, u = self.gate(self.norm2(x)).chunk(2, -1)
        m = nn.functional.silu(g) * u if cfg.use_gate else u
        return x + self.residual_scale * self.layer_scale * self.down(torch.cat([m, m], -1))


class DeepStack(nn.Module):
    def __init__(self, layers: int, d: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.config = StackConfig(d, heads, layers)
        self.embed = nn.Embedding(VOCAB, d)
        self.layers = nn.ModuleList(StackLayer(self.config, i) for i in range(layers))
        self.norm = RMSNorm(self.config)
        self.logit_scale = 0.5

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x) @ self.embed.weight.t() * self.logit_scale


def deep_decoder(quick: bool = False) -> BenchCase:
    torch.manual_seed(0)
    layers = 4 if quick else 32
    return BenchCase(f"deep-decoder-{layers}L", DeepStack(layers).eval(), _ids(2, 8),
                     description=f"{layers} identical decoder layers, float attributes, "
                                 "a shared config object", layers=layers)


def _stack(layers: int) -> Callable[[bool], BenchCase]:
    """``stack-N``: the deep stack at a fixed depth, quick or not (the subtree
    skipping targets compare the check's cost per added layer over 8-64)."""
    def make(quick: bool = False) -> BenchCase:
        torch.manual_seed(0)
        return BenchCase(f"stack-{layers}", DeepStack(layers).eval(), _ids(2, 8),
                         description=f"{layers} identical decoder layers (the deep stack)",
                         layers=layers)
    make.__name__ = f"stack_{layers}"
    return make


stack_8, stack_16, stack_32, stack_64 = (_stack(n) for n in (8, 16, 32, 64))


# --- many parameters and buffers ---------------------------------------------------

class BufferedBlock(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.scale = nn.Parameter(torch.ones(d))
        self.register_buffer("running_mean", torch.zeros(d))
        self.register_buffer("running_var", torch.ones(d))
        self.register_buffer("mask", torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - self.running_mean) * torch.rsqrt(self.running_var + 1e-5)
        return torch.relu(self.lin(x) * self.scale * self.mask) + x


class ParamHeavy(nn.Module):
    def __init__(self, blocks: int, d: int = 16) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(BufferedBlock(d) for _ in range(blocks))
        self.head = nn.Linear(d, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def param_heavy(quick: bool = False) -> BenchCase:
    torch.manual_seed(0)
    blocks = 8 if quick else 96
    model = ParamHeavy(blocks).eval()
    n_tensors = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    return BenchCase("param-heavy", model, lambda: (torch.randn(4, 16),),
                     description=f"{blocks} blocks, {n_tensors} parameters and buffers",
                     layers=blocks)


CORPUS: dict[str, Callable[[bool], BenchCase]] = {
    "gpt2": gpt2,
    "bert": bert,
    "llama": llama,
    "mistral": mistral,
    "t5": t5,
    "qwen3-36L": qwen3,
    "resnet-cnn": cnn,
    "mlp": mlp,
    "decoder": transformer,
    "deep-decoder": deep_decoder,
    "param-heavy": param_heavy,
    "stack-8": stack_8,
    "stack-16": stack_16,
    "stack-32": stack_32,
    "stack-64": stack_64,
}
