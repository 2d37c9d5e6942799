"""Built-in default models for the demo, tests and benchmarks (no downloads).

Each factory returns a :class:`ModelCase`: the module in eval mode, a function
making a tiny example input, and named mutations. A mutation returns the
arguments of one call (it may change the module or a global first) and an
``undo`` that restores what it changed, so every mutation is checked against
Dynamo on exactly the same frame locals.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

# A module-level setting the models read: Dynamo guards on it as a global.
ATTENTION_SOFTCAP = 30.0


@dataclasses.dataclass
class ModelCase:
    name: str
    model: nn.Module
    make_input: Callable[[], tuple]
    # name -> function(model, args) returning (new args, undo)
    mutations: dict[str, Callable[[nn.Module, tuple], tuple[tuple, Callable[[], None]]]]


# --- a decoder-only transformer ----------------------------------------------

class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.scale = 1.0 / math.sqrt(d // heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * self.scale
        cap = sys.modules[__name__].ATTENTION_SOFTCAP
        scores = cap * torch.tanh(scores / cap)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        out = scores.softmax(-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.gelu(self.up(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, residual_scale: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d)
        self.residual_scale = residual_scale  # a float attribute Dynamo guards on
        self.dropout_p = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.residual_scale * self.attn(self.ln1(x))
        x = x + self.residual_scale * nn.functional.dropout(
            self.mlp(self.ln2(x)), self.dropout_p, self.training)
        return x


class DecoderOnlyTransformer(nn.Module):
    def __init__(self, vocab: int = 256, d: int = 64, heads: int = 4, layers: int = 12,
                 max_len: int = 64) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.layers = nn.ModuleList(DecoderLayer(d, heads, 1.0 / math.sqrt(2 * layers))
                                    for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.logit_scale = 1.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln_f(x)) * self.logit_scale


# --- a small CNN -----------------------------------------------------------

class ConvBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.short(x))


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.blocks = nn.Sequential(ConvBlock(16, 16, 1), ConvBlock(16, 32, 2), ConvBlock(32, 64, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


# --- an MLP with two inputs (tensor aliasing is guarded) ----------------------

class TwoInputMLP(nn.Module):
    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(d, d)
        self.gate = 0.5

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x)) * self.gate + self.b(y)


# --- a user-written decoder whose layers share one config object --------------

class DecoderConfig:
    """A plain config object (not an nn.Module), shared by every layer."""

    def __init__(self, d: int, heads: int, layers: int) -> None:
        self.d = d
        self.heads = heads
        self.layers = layers
        self.eps = 1e-5
        self.softcap = 30.0


class SharedConfigBlock(nn.Module):
    def __init__(self, cfg: DecoderConfig, index: int) -> None:
        super().__init__()
        self.cfg = cfg  # the same object in every layer: Dynamo guards aliasing
        self.qkv = nn.Linear(cfg.d, 3 * cfg.d, bias=False)
        self.proj = nn.Linear(cfg.d, cfg.d, bias=False)
        self.up = nn.Linear(cfg.d, 2 * cfg.d, bias=False)
        self.down = nn.Linear(2 * cfg.d, cfg.d, bias=False)
        # float attributes Dynamo guards on
        self.attn_scale = 1.0 / math.sqrt(cfg.d // cfg.heads)
        self.residual_scale = 1.0 / math.sqrt(2.0 * cfg.layers)
        self.depth_scale = 1.0 - 0.5 * index / cfg.layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        b, t, d = x.shape
        h = nn.functional.layer_norm(x, (d,), eps=cfg.eps)
        q, k, v = self.qkv(h).view(b, t, 3, cfg.heads, d // cfg.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(-2, -1)) * self.attn_scale
        s = cfg.softcap * torch.tanh(s / cfg.softcap)
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.residual_scale * self.proj(a)
        h = nn.functional.layer_norm(x, (d,), eps=cfg.eps)
        return x + self.residual_scale * self.depth_scale * self.down(torch.relu(self.up(h)))


class SharedConfigDecoder(nn.Module):
    def __init__(self, layers: int = 48, d: int = 32, heads: int = 2, vocab: int = 256) -> None:
        super().__init__()
        self.cfg = DecoderConfig(d, heads, layers)
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(SharedConfigBlock(self.cfg, i) for i in range(layers))
        self.head = nn.Linear(d, vocab, bias=False)
        self.logit_scale = 1.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids)
        for block in self.blocks:
            x = block(x)
        h = nn.functional.layer_norm(x, (self.cfg.d,), eps=self.cfg.eps)
        return self.head(h) * self.logit_scale


# --- mutations ---------------------------------------------------------------

def _replace_arg(i: int, fn: Callable[[torch.Tensor], Any]):
    def mutate(model: nn.Module, args: tuple):
        new = list(args)
        new[i] = fn(args[i])
        return tuple(new), lambda: None
    return mutate


def _set_attr(get_obj: Callable[[nn.Module], Any], attr: str, value: Any):
    def mutate(model: nn.Module, args: tuple):
        obj = get_obj(model)
        old = getattr(obj, attr)
        setattr(obj, attr, value)
        return args, lambda: setattr(obj, attr, old)
    return mutate


def _set_global(name: str, value: Any):
    def mutate(model: nn.Module, args: tuple):
        mod = sys.modules[__name__]
        old = getattr(mod, name)
        setattr(mod, name, value)
        return args, lambda: setattr(mod, name, old)
    return mutate


def _train(model: nn.Module, args: tuple):
    model.train()
    return args, model.eval


def _requires_grad(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True) if t.is_floating_point() else t.clone()


def _same(model: nn.Module, args: tuple):
    return tuple(a.clone() for a in args), lambda: None


def _grad_mode(model: nn.Module, args: tuple):
    prev = torch.is_grad_enabled()
    torch.set_grad_enabled(not prev)
    return args, lambda: torch.set_grad_enabled(prev)


def _common(i: int = 0) -> dict[str, Any]:
    return {
        "same values (fresh tensor)": _same,
        "dtype float64": _replace_arg(i, lambda t: t.double() if t.is_floating_point() else t.long() * 0 + t),
        "dtype int32": _replace_arg(i, lambda t: t.to(torch.int32)),
        "shape +1 on dim 0": _replace_arg(i, lambda t: torch.cat([t, t[:1]], 0)),
        "non-contiguous stride": _replace_arg(i, lambda t: t.transpose(0, -1).contiguous().transpose(0, -1)),
        "requires_grad flip": _replace_arg(i, _requires_grad),
        "train mode": _train,
        "grad mode flip": _grad_mode,
        "not a tensor (list)": _replace_arg(i, lambda t: t.tolist()),
        "Parameter instead of Tensor": _replace_arg(i, lambda t: nn.Parameter(t.clone(), requires_grad=False)),
    }


def transformer(layers: int = 12) -> ModelCase:
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(layers=layers).eval()
    mutations = _common()
    mutations.update({
        "module float attribute (residual_scale)": _set_attr(lambda m: m.layers[3], "residual_scale", 0.25),
        "module float attribute (logit_scale)": _set_attr(lambda m: m, "logit_scale", 2.0),
        "global value (ATTENTION_SOFTCAP)": _set_global("ATTENTION_SOFTCAP", 50.0),
        "LayerNorm eps": _set_attr(lambda m: m.layers[0].ln1, "eps", 1e-3),
        "submodule replaced": _set_attr(lambda m: m, "ln_f", nn.LayerNorm(64)),
    })
    return ModelCase(f"transformer-{layers}L", model,
                     lambda: (torch.randint(0, 256, (2, 16)),), mutations)


def cnn() -> ModelCase:
    torch.manual_seed(0)
    model = SmallCNN().eval()
    mutations = _common()
    mutations.update({
        "BatchNorm momentum": _set_attr(lambda m: m.blocks[1].bn1, "momentum", 0.5),
        "channels_last": _replace_arg(0, lambda t: t.to(memory_format=torch.channels_last)),
        "batch 1": _replace_arg(0, lambda t: t[:1].clone()),
    })
    return ModelCase("cnn", model, lambda: (torch.randn(2, 3, 16, 16),), mutations)


def two_input_mlp() -> ModelCase:
    torch.manual_seed(0)
    model = TwoInputMLP().eval()
    mutations = _common()
    mutations.update({
        "aliased inputs (x is y)": lambda m, args: ((args[0], args[0]), lambda: None),
        "module float attribute (gate)": _set_attr(lambda m: m, "gate", 0.75),
        "second input dtype": _replace_arg(1, lambda t: t.double()),
    })
    return ModelCase("two-input-mlp", model, lambda: (torch.randn(4, 32), torch.randn(4, 32)),
                     mutations)


def _own_config_copy(i: int):
    """Layer ``i`` gets its own copy of the shared config (aliasing broken)."""
    def mutate(model: nn.Module, args: tuple):
        import copy

        block = model.blocks[i]
        shared = block.cfg
        block.cfg = copy.copy(shared)
        return args, lambda: setattr(block, "cfg", shared)
    return mutate


def shared_config_decoder(layers: int = 48) -> ModelCase:
    """A user-written decoder of ``layers`` blocks with float attributes and
    one config object shared by every block (the object-aliasing guards)."""
    torch.manual_seed(0)
    model = SharedConfigDecoder(layers).eval()
    mutations = _common()
    mutations.update({
        "one layer gets its own config copy": _own_config_copy(layers // 2),
        "last layer gets its own config copy": _own_config_copy(layers - 1),
        "block float attribute (depth_scale)": _set_attr(lambda m: m.blocks[1], "depth_scale", 0.3),
        "config eps": _set_attr(lambda m: m.cfg, "eps", 1e-3),
    })
    return ModelCase(f"shared-config-decoder-{layers}L", model,
                     lambda: (torch.randint(0, 256, (2, 8)),), mutations)


DEFAULT_MODELS: dict[str, Callable[[], ModelCase]] = {
    "transformer": transformer,
    "cnn": cnn,
    "two-input-mlp": two_input_mlp,
}
