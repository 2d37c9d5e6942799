"""Review of issue 27's `export --serve`: a non-tensor input whose value
differs between buckets.

torch.export specializes a non-tensor input, so each package bakes in its
bucket's value, and a request to the host carries only the tensors. Buckets
``(x[1, 4], n=2)`` and ``(x[4, 4], n=3)`` made a bundle that multiplies by 2
or by 3 depending on the request's batch size (no manifest field said so):
the export now refuses it.
"""

from __future__ import annotations

import math

import pytest
import torch

from guardjit import serving


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, n: float) -> torch.Tensor:
        return self.lin(x) * n


def test_differing_non_tensor_inputs_are_refused(tmp_path):
    with pytest.raises(serving.ServeExportError,
                       match=r"bucket b4_float32: non-tensor input \[0\]\[1\] is 3, 2 in "
                             r"bucket b1_float32: a request carries only tensors"):
        serving.export_bundle(Scaled(), [(torch.randn(1, 4), 2), (torch.randn(4, 4), 3)],
                              str(tmp_path), progress=False)
    # Nothing compiled: the check runs before the packages.
    assert not list(tmp_path.glob("*.pt2"))


def test_equal_non_tensor_inputs_pass_the_check():
    b = [serving.Bucket((torch.randn(1, 4), 2.0)), serving.Bucket((torch.randn(4, 4), 2.0)),
         serving.Bucket((torch.randn(2, 4), math.nan), name="nan")]
    serving._check_constants(b[:2], ["a", "b"])
    serving._check_constants([b[2], b[2]], ["nan", "nan2"])  # the same object
    with pytest.raises(serving.ServeExportError, match="is True, 1 in bucket a"):
        serving._check_constants([serving.Bucket((torch.randn(1, 4), 1)),
                                  serving.Bucket((torch.randn(4, 4), True))], ["a", "b"])
    with pytest.raises(serving.ServeExportError, match=r"\['k'\] is 1, absent in bucket a"):
        serving._check_constants([serving.Bucket((torch.randn(1, 4),), {}),
                                  serving.Bucket((torch.randn(4, 4),), {"k": 1})], ["a", "b"])


class MutatesX(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2


def test_examples_of_a_model_that_mutates_its_input(tmp_path):
    """``<name>.inputs.pt`` holds the inputs as given and ``<name>.expected.pt``
    eager's output on them (before the fix the inputs were saved after the
    compile call and eager's call had each added 1: the package run on the
    saved example differed from the saved expected output by 2)."""
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))
    given = x.clone()
    man = serving.export_bundle(MutatesX(), [(x,)], str(tmp_path), progress=False)
    (a,) = man["artifacts"]
    (example,) = torch.load(tmp_path / a["example"])
    (expected,) = torch.load(tmp_path / a["expected"])
    torch.testing.assert_close(example, given, rtol=0, atol=0)
    torch.testing.assert_close(expected, (given + 1) * 2)
    package = torch._inductor.aoti_load_package(str(tmp_path / a["package"]))
    with torch.no_grad():
        torch.testing.assert_close(package(example.clone()), expected)
