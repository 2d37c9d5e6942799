"""guardjit in torch's own tools (issue 28, docs/advise.md).

- torch.profiler: a "guardjit check" event (a C++ RecordFunction in
  python/src/NativeGuard.cpp) nested in Dynamo's "TorchDynamo Cache Lookup",
  with subtree skip hits and fallbacks as marker events inside it;
- TORCH_LOGS=guards,recompiles: guardjit's lines in torch's artifact logs;
- TORCH_TRACE: a ``guardjit_unit`` structured artifact per converted unit,
  listed by tlparse.

Observability only: every test also checks the compiled model's outputs
against eager.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import guardjit
from guardjit import _core, _logging, plugin

LOOKUP = "TorchDynamo Cache Lookup"


class Layer(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(d, d)
        self.alpha = 0.5

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.alpha


class Stack(torch.nn.Module):
    def __init__(self, n: int = 3, d: int = 8) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer(d) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _compiled():
    torch.manual_seed(0)
    model = Stack()
    opt = guardjit.compile(model, backend="eager")
    x = torch.randn(2, 8)
    with torch.no_grad():
        opt(x)
        plugin.wait_for_tier_up()
        opt(x)  # the snapshot of the first call predates the compile's end
    return model, opt, x


def _profile(opt, x, calls: int, record_shapes: bool = True):
    outs = []
    with torch.no_grad(), torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            record_shapes=record_shapes) as prof:
        for _ in range(calls):
            outs.append(opt(x))
    return prof, outs


def _named(prof, name: str):
    return [e for e in prof.events() if e.name == name]


def _inside(inner, outer) -> bool:
    return (outer.time_range.start <= inner.time_range.start
            and inner.time_range.end <= outer.time_range.end)


def test_profiler_event_nests_in_cache_lookup():
    model, opt, x = _compiled()
    [unit] = [u for u in plugin.units() if u.status != "dynamo"]
    prof, outs = _profile(opt, x, 3)
    lookups = _named(prof, LOOKUP)
    checks = _named(prof, "guardjit check")
    assert len(lookups) == 3
    assert len(checks) == 3  # one per lookup: the unit's only cache entry
    for c in checks:
        assert c.cpu_parent is not None and c.cpu_parent.name == LOOKUP
        assert any(_inside(c, lk) for lk in lookups)
    averages = {a.key: a for a in prof.key_averages()}
    assert averages["guardjit check"].count == 3
    with torch.no_grad():
        for out in outs:
            torch.testing.assert_close(out, model(x))
    # The unit name is the compile id the check belongs to.
    assert unit.name == "0/0"


def test_chrome_trace_has_the_event_with_the_unit(tmp_path):
    _, opt, x = _compiled()
    [unit] = [u for u in plugin.units() if u.status != "dynamo"]
    tier = "native" if _core.guard_counters(unit.check)[2] else "interpreter"
    prof, _ = _profile(opt, x, 2)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    checks = [e for e in events if e.get("name") == "guardjit check"]
    lookups = [e for e in events if e.get("name") == LOOKUP]
    assert len(checks) == 2 and len(lookups) == 2
    for c in checks:
        assert any(lk["ts"] <= c["ts"] and c["ts"] + c["dur"] <= lk["ts"] + lk["dur"]
                   for lk in lookups)
        assert c["args"].get("unit") == "0/0", c["args"]
        assert c["args"].get("tier") == tier, c["args"]
        assert c["args"].get("guards") == unit.ir.num_guards, c["args"]


@pytest.mark.usefixtures("skip_every_plan")
def test_subtree_skip_hits_and_fallbacks_are_counted_in_the_profile():
    model, opt, x = _compiled()
    [unit] = [u for u in plugin.units() if u.status != "dynamo"]
    assert _core.skip_stats(unit.check) is not None
    hits = _core.skip_stats(unit.check)["hits"]
    prof, outs = _profile(opt, x, 3)
    assert _core.skip_stats(unit.check)["hits"] - hits == 3
    marks = _named(prof, "guardjit skip hit")
    assert len(marks) == 3
    assert all(m.cpu_parent is not None and m.cpu_parent.name == "guardjit check"
               for m in marks)
    assert not _named(prof, "guardjit skip fallback")
    with torch.no_grad():
        for out in outs:
            torch.testing.assert_close(out, model(x))
    # A module's attribute changes: validation fails, the full check runs
    # (and fails: a recompile), counted as a fallback.
    model.layers[1].alpha = 0.25
    prof, outs2 = _profile(opt, x, 1)
    assert len(_named(prof, "guardjit skip fallback")) == 1
    assert not _named(prof, "guardjit skip hit")
    with torch.no_grad():
        torch.testing.assert_close(outs2[0], model(x))


def test_no_event_without_a_profiler():
    _, opt, x = _compiled()
    [unit] = [u for u in plugin.units() if u.status != "dynamo"]
    calls = _core.guard_counters(unit.check)[0]
    with torch.no_grad():
        opt(x)  # before the profiler: not recorded
        prof, _ = _profile(opt, x, 1, record_shapes=False)
        opt(x)  # after it: not recorded
    assert len(_named(prof, "guardjit check")) == 1
    assert _core.guard_counters(unit.check)[0] - calls == 3
    # The benchmark aid runs the callable's path and the bare call alike.
    f_locals = unit.f_locals
    assert _core.time_guard_calls(unit.check, f_locals, 10, recorded=True) > 0
    assert _core.time_guard_calls(unit.check, f_locals, 10, recorded=False) > 0
    assert _core.guard_counters(unit.check)[0] - calls == 23


def test_events_off_and_the_lookup_benchmark():
    """set_profiler_events(False) drops the events; the lookup benchmark
    turns them off while it profiles (the lookup's self time must hold
    guardjit's whole check) and restores the setting."""
    from guardjit.bench.lookup import LOOKUP_EVENT, profile_lookup_us

    model, opt, x = _compiled()
    assert _core.set_profiler_events(False) is True
    try:
        prof, outs = _profile(opt, x, 2)
    finally:
        assert _core.set_profiler_events(True) is False
    assert len(_named(prof, LOOKUP_EVENT)) == 2
    assert not [e for e in prof.events() if e.name.startswith("guardjit")]
    seen: list[bool] = []

    def call():
        on = _core.set_profiler_events(False)  # read the setting
        _core.set_profiler_events(on)
        seen.append(on)
        return opt(x)

    with torch.no_grad():
        events: list[int] = []
        assert profile_lookup_us(call, 3, events) > 0
        assert events == [3] and seen == [False] * 3
        torch.testing.assert_close(outs[0], model(x))
    assert _core.set_profiler_events(True) is True  # restored


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def torch_logs():
    """torch._logging.set_logs(guards=True, recompiles=True), as
    TORCH_LOGS=guards,recompiles; a handler on guardjit's artifact loggers'
    parent collects their lines."""
    handler = _Lines()
    parent = logging.getLogger(_logging._TORCH_QNAME)
    parent.addHandler(handler)
    torch._logging.set_logs(guards=True, recompiles=True)
    try:
        yield handler.lines
    finally:
        torch._logging.set_logs()
        parent.removeHandler(handler)


def test_torch_logs_guards_and_recompiles(torch_logs):
    torch.manual_seed(0)
    model = Stack()
    opt = guardjit.compile(model, backend="eager")
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), model(x))
    [unit] = [u for u in plugin.units() if u.status != "dynamo"]
    [line] = [s for s in torch_logs if s.startswith("guardjit checks unit")]
    assert line.startswith(f"guardjit checks unit 0/0: {unit.guards} guards")
    assert f"mode {unit.status}, runs " in line
    model.layers[2].alpha = 2.0  # a recompile
    with torch.no_grad():
        out2 = opt(x)
    failed = [s for s in torch_logs if "first failing guard" in s]
    assert len(failed) == 1
    assert failed[0].startswith("guardjit unit 0/0: first failing guard: guard #")
    assert "EQUALS_MATCH on L['self']._modules['layers']._modules['2'].alpha" in failed[0]
    with torch.no_grad():
        torch.testing.assert_close(out2, model(x))


def test_no_torch_log_lines_when_off():
    handler = _Lines()
    parent = logging.getLogger(_logging._TORCH_QNAME)
    parent.addHandler(handler)
    try:
        _, opt, x = _compiled()
    finally:
        parent.removeHandler(handler)
    assert handler.lines == []


_TRACE_SCRIPT = textwrap.dedent("""
    import torch, guardjit
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = torch.randn(2, 8)
    opt = guardjit.compile(m, backend="eager")
    with torch.no_grad():
        out = opt(x)
        assert torch.equal(out, m(x))
    m[0].weight.requires_grad_(False)  # a recompile
    with torch.no_grad():
        assert torch.equal(opt(x), m(x))
    guardjit._logging.trace_artifact("guardjit_test_report", {"answer": 42})
""")


def _trace_run(tmp_path: pathlib.Path) -> pathlib.Path:
    trace = tmp_path / "trace"
    env = dict(os.environ, TORCH_TRACE=str(trace))
    env.pop("GUARDJIT", None)
    subprocess.run([sys.executable, "-c", _TRACE_SCRIPT], env=env, check=True, timeout=600)
    [log] = list(trace.glob("*.log"))
    return log


def _artifacts(log: pathlib.Path) -> list[tuple[dict, object]]:
    """(metadata line, payload) of every artifact in a TORCH_TRACE log: a
    glog-style prefix, a JSON object, then the payload as tab-indented lines
    (decoded for guardjit's artifacts, raw text for torch's)."""
    out = []
    lines = log.read_text().splitlines()
    for i, line in enumerate(lines):
        if '"artifact"' not in line or "{" not in line:
            continue
        meta = json.loads(line[line.index("{"):])
        payload = []
        for p in lines[i + 1:]:
            if not p.startswith("\t"):
                break
            payload.append(p[1:])
        text = "\n".join(payload)
        # torch's own "json" artifacts may hold a bare string (recompile_reasons)
        json_payload = meta["artifact"]["name"].startswith("guardjit") and payload
        out.append((meta, json.loads(text) if json_payload else text))
    return out


def test_torch_trace_has_guardjit_unit_artifacts(tmp_path):
    log = _trace_run(tmp_path)
    arts = _artifacts(log)
    units = [(m, p) for m, p in arts if m["artifact"]["name"] == "guardjit_unit"]
    assert [p["unit"] for _, p in units] == ["0/0", "0/1"]
    meta, payload = units[0]
    assert meta["artifact"]["encoding"] == "json"
    assert meta.get("frame_id") == 0 and meta.get("frame_compile_id") == 0
    assert payload["unit"] == "0/0"
    assert payload["status"] in ("native", "interpreter")
    assert payload["guards"] > 0 and sum(payload["kinds"].values()) == payload["checked_guards"]
    assert "TENSOR_MATCH" in payload["kinds"]
    [(meta, recompile)] = [(m, p) for m, p in arts
                           if m["artifact"]["name"] == "guardjit_recompile"]
    assert meta.get("frame_compile_id") == 1  # logged in the recompile
    assert recompile["unit"] == "0/0"
    assert recompile["first_failing_guard"].startswith("guard #")
    assert "TENSOR_MATCH" in recompile["first_failing_guard"]
    [report] = [p for m, p in arts if m["artifact"]["name"] == "guardjit_test_report"]
    assert report == {"answer": 42}


def _tlparse() -> str | None:
    here = pathlib.Path(sys.executable).parent / "tlparse"
    return str(here) if here.exists() else shutil.which("tlparse")


def test_tlparse_lists_guardjit_artifacts(tmp_path):
    tlparse = _tlparse()
    assert tlparse, "tlparse is not installed (scripts/setup.sh installs it from PyPI)"
    log = _trace_run(tmp_path)
    out = tmp_path / "tl_out"
    subprocess.run([tlparse, str(log), "-o", str(out), "--no-browser"], check=True,
                   timeout=300, capture_output=True)
    files = [p.name for p in out.rglob("*") if p.is_file()]
    assert any(n.startswith("guardjit_unit") for n in files), files
    assert any(n.startswith("guardjit_recompile") for n in files), files
    index = (out / "index.html").read_text()
    compile_pages = "".join(p.read_text() for p in out.rglob("*.html"))
    assert "guardjit_unit" in index + compile_pages
