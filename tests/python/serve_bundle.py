"""A small serve bundle (the guardjit-serve/1 contract) for tools/guardjit-serve.

``build_bundle(out_dir)`` writes three AOTInductor packages of one small MLP
(batch 1 float32, batch 4 float32, batch 4 bfloat16), each with its portable
guard set, a ``select.gir`` of differentiating sets, ``manifest.json`` and
``global_state.json``, plus ``requests.pt`` (hits on every artifact and
misses) and ``expected.json`` / ``expected.pt`` (eager outputs, misses'
failing guards) for the test.

This is the test fixture's minimal builder, written to the contract in
docs/serving.md; ``python -m guardjit export --serve`` is the
user-facing one. What it does by hand:
  - the guard set of each artifact is the compile unit ``guardjit.compile``
    records for the same inputs, restricted to guards on the request input
    ``L['x']`` and to ambient ones (GLOBAL_STATE, SHAPE_ENV); guards on
    ``L['self']`` (parameters, module structure: constants of the package)
    and on globals are dropped and counted in the manifest. The host's
    ``PortableSet::load`` then runs ``keep_portable_guards_unsafe``.
  - the select set of an artifact is its TENSOR_MATCH guard on ``L['x']``
    (dtype, sizes, strides tell the three artifacts apart).

Run as a script: ``python serve_bundle.py OUT_DIR``.
"""

from __future__ import annotations

import json
import os
import re
import sys

import torch

INPUT_SOURCE = "L['x']"
# (name, batch, dtype); bucket sizes are static shapes in the packages.
ARTIFACTS = [("b1_float32", 1, torch.float32),
             ("b4_float32", 4, torch.float32),
             ("b4_bfloat16", 4, torch.bfloat16)]
FEATURES = 16


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(FEATURES, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def make_model(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    return MLP().eval().to(dtype)


_SOURCE_RE = re.compile(r' source="((?:[^"\\]|\\.)*)"')
_SET_RE = re.compile(r'^guard_set "(?:[^"\\]|\\.)*" \{$')


def _restrict(gir: str, set_name: str, keep_guard) -> tuple[str, dict[str, int]]:
    """The one guard set of ``gir`` renamed ``set_name``, with only the guard
    lines ``keep_guard(kind, source)`` accepts; the dropped ones counted by
    reason."""
    out, dropped, sets = [], {}, 0
    for line in gir.splitlines():
        if line.startswith("gir "):
            continue
        if _SET_RE.match(line):
            sets += 1
            line = f'guard_set "{set_name}" {{'
        elif line.startswith("  guard "):
            kind = line.split()[1]
            m = _SOURCE_RE.search(line)
            source = m.group(1) if m else ""
            reason = keep_guard(kind, source)
            if reason is not None:
                dropped[reason] = dropped.get(reason, 0) + 1
                continue
        out.append(line)
    assert sets == 1, f"expected one guard set, found {sets}"
    return "\n".join(out).strip("\n") + "\n", dropped


def _full_filter(kind: str, source: str):
    if source == INPUT_SOURCE or source in ("", "L"):
        return None
    if source.startswith("L['self']"):
        return "module state (constant in the package)"
    if source.startswith("G["):
        return "global Python object"
    return "not a request input"


def _select_filter(kind: str, source: str):
    if kind == "tensor_match" and source == INPUT_SOURCE:
        return None
    return "not differentiating"


def _record_gir(model: torch.nn.Module, x: torch.Tensor) -> str:
    """The .gir text of the one compile unit guardjit records for model(x)."""
    import guardjit
    from guardjit import plugin, stable_text
    from guardjit.embedding import version_header
    torch._dynamo.reset()
    plugin.clear_units()
    keep = plugin.config.keep_units
    plugin.config.keep_units = True
    try:
        # Served without grad (the host's default, --grad-mode turns it on).
        with torch.no_grad():
            guardjit.compile(model, backend="eager")(x)
        units = [u for u in plugin.units() if u.status != "dynamo"]
        assert len(units) == 1, [(u.name, u.status, u.reason) for u in plugin.units()]
        u = units[0]
        ir = u.recorded_ir if u.recorded_ir is not None else u.ir
        return version_header() + "\n" + stable_text.normalize(ir.print())
    finally:
        plugin.config.keep_units = keep
        plugin.clear_units()
        torch._dynamo.reset()


def make_requests() -> tuple[list[list[torch.Tensor]], list[dict]]:
    """Requests covering every artifact plus misses, with what each expects."""
    g = torch.Generator().manual_seed(1)

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    reqs, expect = [], []
    for name, batch, dtype in ARTIFACTS:
        for _ in range(2):
            reqs.append([rand(batch, FEATURES, dtype=dtype)])
            expect.append({"artifact": name})
    misses = [
        (rand(4, FEATURES, dtype=torch.float64), "dtype"),  # wrong dtype
        (rand(3, FEATURES), "size"),  # unseen batch size
        (rand(FEATURES), "ndim"),  # wrong ndim
        (rand(FEATURES, 4).t(), "stride"),  # batch 4, not contiguous
        (rand(4, FEATURES).requires_grad_(), "requires_grad"),
    ]
    for x, field in misses:
        reqs.append([x])
        expect.append({"miss": field})
    return reqs, expect


def build_bundle(out_dir: str) -> str:
    from torch._inductor import aoti_compile_and_package
    os.makedirs(out_dir, exist_ok=True)
    artifacts, select_sets, select_text, dropped = [], {}, [], {}
    header = None
    for name, batch, dtype in ARTIFACTS:
        model = make_model(dtype)
        x = torch.randn(batch, FEATURES).to(dtype)
        gir = _record_gir(model, x)
        header = gir.splitlines()[0]
        full, d = _restrict(gir, name, _full_filter)
        for k, v in d.items():
            dropped[k] = dropped.get(k, 0) + v
        with open(os.path.join(out_dir, f"{name}.gir"), "w", encoding="utf-8") as f:
            f.write(header + "\n\n" + full)
        sel, _ = _restrict(gir, f"select/{name}", _select_filter)
        select_text.append(sel)
        select_sets[name] = f"select/{name}"
        with torch.no_grad():
            ep = torch.export.export(model, (x,))
            aoti_compile_and_package(ep, package_path=os.path.join(out_dir, f"{name}.pt2"))
        torch.save([x], os.path.join(out_dir, f"{name}.inputs.pt"))
        artifacts.append({"name": name, "package": f"{name}.pt2", "guards": f"{name}.gir",
                          "set": name, "example": f"{name}.inputs.pt"})
    with open(os.path.join(out_dir, "select.gir"), "w", encoding="utf-8") as f:
        f.write(header + "\n\n" + "\n".join(select_text))
    with torch.no_grad():
        state = torch._C._dynamo.guards.GlobalStateGuard().__getstate__()
    with open(os.path.join(out_dir, "global_state.json"), "w", encoding="utf-8") as f:
        f.write(state)
    manifest = {"format": "guardjit-serve/1", "torch": torch.__version__.split("+")[0],
                "model": "mlp",
                "inputs": [{"name": "x", "source": INPUT_SOURCE, "kind": "tensor"}],
                "artifacts": artifacts, "dropped": dropped,
                "select": {"file": "select.gir", "sets": select_sets}}
    with open(os.path.join(out_dir, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)

    # Requests and what eager answers.
    reqs, expect = make_requests()
    models = {name: make_model(dtype) for name, _, dtype in ARTIFACTS}
    outputs = []
    for r, e in zip(reqs, expect):
        if "artifact" in e:
            with torch.no_grad():
                outputs.append([models[e["artifact"]](*r)])
        else:
            outputs.append([])
    torch.save(reqs, os.path.join(out_dir, "requests.pt"))
    torch.save(outputs, os.path.join(out_dir, "expected.pt"))
    with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expect, f, indent=1)
    return out_dir


if __name__ == "__main__":
    print(build_bundle(sys.argv[1]))
