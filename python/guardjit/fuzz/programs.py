"""Small generated programs for the fuzzer: random but valid Python source.

A program is a module text built from a seed: a function ``fn`` (or an
``nn.Module`` subclass ``Mod``, whose ``forward`` is the frame) that reads a
random subset of the features Dynamo guards on:

* tensor arguments (one or two, possibly the same object at compile time:
  aliasing), a ``None``-or-tensor argument, an int and a bool argument, a
  dict argument (keys read and ``in``-tested), a list argument;
* module globals (a float, a bool, a config object's attributes, a helper
  function with ``__defaults__``, a ``weakref.ref`` to an object);
* closure cells (a float and a helper function captured by ``fn``);
* for ``Mod``: float/int/bool attributes, a submodule, a buffer.

The text is the whole program (a reproducer embeds it); :func:`load` execs it
into a fresh module registered in ``sys.modules``. Each program's ``ARGS()``
returns the positional arguments of one call, ``ENTRY`` the callable that is
compiled (``fn`` or an instance of ``Mod``).
"""

from __future__ import annotations

import dataclasses
import os
import random
import sys
import tempfile
import types

_HEADER = '''\
import math
import weakref

import torch
from torch import nn

'''


@dataclasses.dataclass
class Program:
    name: str
    source: str
    module_style: bool

    def load(self) -> types.ModuleType:
        return load(self.name, self.source)


def _f(rng: random.Random) -> str:
    return repr(round(rng.uniform(0.25, 3.0), 3))


def generate(seed: int) -> Program:
    """A random program; the same seed gives the same text."""
    rng = random.Random(f"program:{seed}")
    feat = {k: rng.random() < p for k, p in (
        ("y", 0.6), ("alias", 0.3), ("opt", 0.5), ("n", 0.6), ("flag", 0.6), ("opts", 0.5),
        ("items", 0.4), ("scale", 0.7), ("gflag", 0.4), ("cfg", 0.6), ("helper", 0.6),
        ("ref", 0.3), ("cell", 0.5), ("cellfn", 0.3), ("module", 0.4))}
    if not feat["y"]:
        feat["alias"] = False
    ndim = rng.choice((1, 2, 2, 3))
    shape = tuple(rng.choice((2, 3, 4)) for _ in range(ndim))
    dtype = rng.choice(("torch.float32", "torch.float32", "torch.float64"))
    g = [_HEADER]
    g.append(f"SCALE = {_f(rng)}\n")
    g.append(f"GFLAG = {rng.random() < 0.5}\n")
    g.append("\n\nclass Cfg:\n    def __init__(self, alpha, n, mode):\n"
             "        self.alpha = alpha\n        self.n = n\n        self.mode = mode\n\n\n")
    g.append(f"CFG = Cfg({_f(rng)}, {rng.randint(1, 4)}, {rng.choice(['sum', 'mean'])!r})\n")
    g.append(f"HOLDER = Cfg({_f(rng)}, 1, 'ref')\nREF = weakref.ref(HOLDER)\n\n\n")
    g.append(f"def helper(t, k={rng.randint(1, 3)}, s={_f(rng)}):\n    return t * k + s\n\n\n")
    params = ["x"]
    if feat["y"]:
        params.append("y")
    if feat["opt"]:
        params.append("z")
    if feat["n"]:
        params.append("n")
    if feat["flag"]:
        params.append("flag")
    if feat["opts"]:
        params.append("opts")
    if feat["items"]:
        params.append("items")
    body = ["out = x * 1.5"]
    if feat["y"]:
        body.append("out = out + y")
    if feat["opt"]:
        body += ["if z is not None:", "    out = out - z"]
    if feat["n"]:
        body.append("out = out * n")
    if feat["flag"]:
        body += ["if flag:", "    out = out.sin()"]
    if feat["opts"]:
        body += ["out = out + opts['a']", "if 'b' in opts:", "    out = out * opts['b']"]
    if feat["items"]:
        body += ["for it in items:", "    out = out + it"]
    if feat["scale"]:
        body.append("out = out * SCALE")
    if feat["gflag"]:
        body += ["if GFLAG:", "    out = out + 1"]
    if feat["cfg"]:
        body += ["out = out * CFG.alpha + CFG.n", "if CFG.mode == 'sum':", "    out = out + 2"]
    if feat["helper"]:
        body.append("out = helper(out)")
    if feat["ref"]:
        body += ["r = REF()", "if r is not None:", "    out = out * r.alpha"]
    if feat["cell"]:
        body.append("out = out + cell_v")
    if feat["cellfn"]:
        body.append("out = cell_fn(out)")
    if feat["module"]:
        body += ["out = self.lin(out) if self.use_lin else out",
                 "out = out * self.gain + self.buf", "if self.training:", "    out = out * 2",
                 f"out = out + self.count"]
    body.append("return out")
    closure = []
    if feat["cell"]:
        closure.append(f"cell_v = {_f(rng)}")
    if feat["cellfn"]:
        closure.append(f"cell_fn = lambda t, c={_f(rng)}: t - c")
    width = shape[-1]
    if feat["module"]:
        init = ["super().__init__()", f"self.lin = nn.Linear({width}, {width})",
                f"self.use_lin = {rng.random() < 0.7}", f"self.gain = {_f(rng)}",
                f"self.register_buffer('buf', torch.ones({width}))",
                f"self.count = {rng.randint(0, 3)}"]
        if dtype == "torch.float64":
            init.append("self.double()")
        for c in closure:
            init.append("self." + c.replace(" = ", " = ", 1))
        g.append("class Mod(nn.Module):\n    def __init__(self):\n")
        g.append("".join(f"        {line}\n" for line in init))
        g.append(f"\n    def forward(self, {', '.join(params)}):\n")
        if feat["cell"]:
            body.insert(0, "cell_v = self.cell_v")
        if feat["cellfn"]:
            body.insert(0, "cell_fn = self.cell_fn")
        g.append("".join(f"        {line}\n" for line in body))
        g.append("\n\nENTRY = Mod().eval()\n")
    else:
        g.append("def make():\n")
        g.append("".join(f"    {c}\n" for c in closure))
        g.append(f"\n    def fn({', '.join(params)}):\n")
        g.append("".join(f"        {line}\n" for line in body))
        g.append("    return fn\n\n\nENTRY = make()\n")
    # The arguments of a call.
    args = [f"torch.randn({shape}, dtype={dtype}, generator=gen)"]
    if feat["y"]:
        args.append("x" if feat["alias"] else f"torch.randn({shape}, dtype={dtype}, generator=gen)")
    if feat["opt"]:
        args.append("None" if rng.random() < 0.5 else f"torch.ones({shape}, dtype={dtype})")
    if feat["n"]:
        args.append(str(rng.randint(1, 4)))
    if feat["flag"]:
        args.append(str(rng.random() < 0.5))
    if feat["opts"]:
        args.append("{'a': %s%s}" % (_f(rng), ", 'b': 2.0" if rng.random() < 0.5 else ""))
    if feat["items"]:
        args.append("[%s]" % ", ".join(_f(rng) for _ in range(rng.randint(1, 3))))
    g.append("\n\ndef ARGS():\n    gen = torch.Generator().manual_seed(0)\n")
    g.append(f"    x = {args[0]}\n")
    g.append(f"    return (x, {', '.join(args[1:])})\n" if len(args) > 1 else "    return (x,)\n")
    return Program(f"guardjit_fuzz_prog_{seed}", "".join(g), feat["module"])


def load(name: str, source: str) -> types.ModuleType:
    """Execs ``source`` as module ``name`` (replacing an earlier one); its
    file is written under the temp directory so tracebacks show the text."""
    path = os.path.join(tempfile.gettempdir(), "guardjit-fuzz", name + ".py")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(source)
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod
    exec(compile(source, path, "exec"), mod.__dict__)  # noqa: S102 - our own generated text
    return mod
