"""Models the advise tests share (test_advise.py, test_advise_report.py)."""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    """One repeated layer: advise finds ``self.layers`` by its indices."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))
