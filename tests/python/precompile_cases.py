"""The functions, module and inputs test_precompile.py compiles, shared with
the fresh processes it starts (they import this file: a loaded artifact's
code must find the same definitions)."""

from __future__ import annotations

import torch


def f(x, y):
    return torch.sin(x) * 2 + y


def f_n(x, y, n):
    return torch.sin(x) * n + y


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.lin(x))


def x_(*shape, dtype=torch.float32, requires_grad=False, seed=0):
    """A seeded random input."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_(requires_grad)
