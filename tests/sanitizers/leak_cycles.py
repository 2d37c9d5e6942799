"""Compile/evict cycles through torch.compile with guardjit installed, for
LeakSanitizer (scripts/sanitize.sh asan runs it under the ASan build).

Each cycle compiles a few functions and a module (several cache entries per
code object, a recompile, a tier-up swap, a stance root), calls them, and
then evicts everything with ``torch._dynamo.reset()``: every guard set,
bound object table and compiled check of the cycle must be freed. At exit
LeakSanitizer reports what is still unreachable; ``sanitize.sh`` fails when
any reported stack has a frame in guardjit's own code.

Usage: python tests/sanitizers/leak_cycles.py [CYCLES] [--plain]
(CYCLES default 5; --plain: the same cycles with plain torch, GUARDJIT unset,
to tell torch's own leaks from guardjit's)
"""

from __future__ import annotations

import gc
import sys

import torch

import guardjit
from guardjit import plugin


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.scale = 2.0

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale


def pointwise(x, y, flag: bool):
    return x * y + 1 if flag else x - y


def one_cycle() -> None:
    block = Block()
    f = torch.compile(pointwise, backend="eager")
    m = torch.compile(block, backend="eager")
    for shape in [(4, 8), (2, 8), (3, 8)]:        # recompiles, several entries
        x = torch.randn(*shape)
        y = x.clone()
        f(x, x, True)
        f(x, y, False)
        m(x)
    if plugin._installed:
        plugin.wait_for_tier_up()                  # the O1 code is swapped in
    with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
        f(x, x, True)                              # warmed inputs: diff roots run
        f(x, y, False)
    block.scale = 3.0                              # a guard fails: recompile
    m(torch.randn(4, 8))
    torch._dynamo.reset()                          # evict every cache entry
    gc.collect()


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--plain"]
    plain = "--plain" in sys.argv[1:]
    cycles = int(args[0]) if args else 5
    if plain:
        for _ in range(cycles):
            one_cycle()
        print(f"leak_cycles: {cycles} cycles, plain torch")
        return 0
    assert guardjit.install()
    for _ in range(cycles):
        one_cycle()
    stats = guardjit.stats()
    assert stats["units_native"] > 0, stats
    plugin.wait_for_tier_up()
    guardjit.uninstall()
    print(f"leak_cycles: {cycles} cycles, {stats['units_native']} native units")
    return 0


if __name__ == "__main__":
    sys.exit(main())
