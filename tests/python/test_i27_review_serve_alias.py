"""Review of issue 27's `tools/guardjit-serve`: overlapping request inputs to a
package that mutates an input.

A model that mutates ``x`` in place and reads ``y``, exported on distinct
inputs, given ``x`` and ``y`` that overlap in memory (``base[0:4]`` and
``base[1:5]``) passes every guard: TENSOR_MATCH, and NO_TENSOR_ALIASING, which
(as Dynamo's, by object identity) only refuses two inputs that are one
tensor. The package would then answer other than eager (plain
``torch.compile`` compiled on distinct inputs gives the same wrong answer).
The manifest lists the inputs each package writes (``mutates``) and
ServeHost refuses a request where one overlaps another input (the byte
ranges: tests/unit/Serve/OverlapTest.cpp). A request *file* cannot carry the
overlap: ``torch::jit::pickle_load`` gives every tensor its own storage, so
the command line serves such a request as separate tensors, with eager's
answer on copies.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch

from guardjit import serving

BIN = os.environ.get("GUARDJIT_SERVE_BIN", "")

pytestmark = pytest.mark.skipif(
    not BIN or not os.path.exists(BIN),
    reason="GUARDJIT_SERVE_BIN is not set or does not exist (see test_guardjit_serve.py)")


class MutatesX(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2 + y


def _overlapping() -> tuple[torch.Tensor, torch.Tensor]:
    base = torch.randn(5, 16, generator=torch.Generator().manual_seed(3))
    return base[0:4], base[1:5]


def _serve(bin_args, tmp_path, requests):
    torch.save(requests, tmp_path / "req.pt")
    out = subprocess.run([BIN, *bin_args, "--requests", str(tmp_path / "req.pt"), "--json",
                          "--out", str(tmp_path / "out.pt")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["requests"], torch.load(tmp_path / "out.pt")


def test_mutating_package_records_its_writes_and_serves_copies(tmp_path):
    out_dir = str(tmp_path / "bundle")
    man = serving.export_bundle(MutatesX(), [(torch.randn(4, 16), torch.randn(4, 16))],
                                out_dir, progress=False, examples=False)
    assert man["artifacts"][0]["mutates"] == ["L['x']"]
    base = torch.randn(8, 16, generator=torch.Generator().manual_seed(5))
    requests = [list(_overlapping()),                       # rows 0-3 and 1-4 of one base
                [base[0:4], base[4:8]],                      # views of one storage, apart
                [torch.randn(4, 16), torch.randn(4, 16)]]    # separate tensors
    with torch.no_grad():   # what the host receives: each tensor with its own storage
        wants = [MutatesX()(*[t.clone() for t in r]) for r in requests]
    for trust in ([], ["--trust-select"]):
        reps, outs = _serve([out_dir, *trust], tmp_path, requests)
        for rep, got, want in zip(reps, outs, wants):
            assert rep["artifact"] == "b4_float32", rep
            torch.testing.assert_close(got[0], want)
