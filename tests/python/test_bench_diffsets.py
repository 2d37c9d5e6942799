"""``python -m guardjit bench --suite diffsets --quick`` writes issue 11's schema.

Two scenarios, all four configurations, each in its own process as users run
it. No timing assertions (shared, noisy machines); the routing verdicts must
be booleans computed from replayed calls; plain torch routes the issue's
cache-line pickup correctly (torch 2.13's own behaviour), and so must each of
guardjit's policies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from guardjit.bench.diffsets import CONFIGS, FIELDS
from guardjit.bench.scenarios import SCENARIOS

QUICK = ("cache-line-pickup", "guardless-single")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("diffsets")
    json_path, md_path = out / "diffsets.json", out / "diffsets-results.md"
    cmd = [sys.executable, "-m", "guardjit", "bench", "--suite", "diffsets", "--quick",
           "--no-progress", "--scenarios", *QUICK, "--json", str(json_path),
           "--report", str(md_path)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("GUARDJIT", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(json_path) as f:
        data = json.load(f)
    return data, proc.stdout, md_path.read_text()


def test_enough_scenarios():
    assert len(SCENARIOS) >= 8


def test_metadata(quick_run):
    data, _, _ = quick_run
    for key in ("cpu", "cores", "python", "torch", "llvm", "date"):
        assert key in data["machine"], key
    assert any(k.startswith("lscpu ") for k in data["machine"])
    for key in ("versions", "guardjit_git", "configs"):
        assert key in data["run"], key
    assert set(data["run"]["configs"]) == set(CONFIGS)


def test_schema_and_verdicts(quick_run):
    data, _, _ = quick_run
    assert [r["name"] for r in data["scenarios"]] == list(QUICK)
    for r in data["scenarios"]:
        for field in FIELDS:
            assert field in r, (r["name"], field)
        assert isinstance(r["units"], int) and r["units"] >= 1
        for c in CONFIGS:
            d = r["details"][c]
            assert "error" not in d, (r["name"], c, d.get("error"), d.get("traceback"))
            assert isinstance(r[f"{c}_guards"], int), (r["name"], c)
            assert r[f"{c}_lookup_us"] is None or isinstance(r[f"{c}_lookup_us"], float)
            ok = r[f"{c}_routed_ok"]
            assert isinstance(ok, bool), (r["name"], c)
            # The verdict comes from replayed calls, and matches them.
            rt = d["routing"]
            assert rt["calls"] >= r["units"] and rt["orders"] >= 1
            assert ok == (rt["misrouted_calls"] == 0 and rt["recompiles"] == 0
                          and rt["backends_equal"])
            # Without the stance the full lookup runs: the checker's oracle holds.
            assert d["oracle"]["ok"], (r["name"], c, d["oracle"])
            want = c != "torch"
            assert d["configuration"]["guardjit_installed"] is want, (r["name"], c)
        # torch's roots in guardjit's units (imported as Guard IR).
        assert isinstance(r["torch_guards_ir"], int), (r["name"], r["details"]["torch"])
    pickup = data["scenarios"][0]
    assert pickup["units"] == 3
    assert pickup["torch_routed_ok"] is True  # torch 2.13's own stance test
    assert pickup["rule"]["applies"] is True
    assert pickup["torch_guards"] > 0 and pickup["torch_guards_ir"] > 0


def test_every_policy_routes(quick_run):
    """Issue 11: guardjit's differentiating sets route every warmed input
    (the issue's report and the lone guardless unit), under each policy."""
    data, _, _ = quick_run
    for r in data["scenarios"]:
        for c in CONFIGS:
            assert r["details"][c]["configuration"]["policy_effective"] == (
                CONFIGS[c]["GUARDJIT_DIFFSET_POLICY"]), (r["name"], c)
            assert r[f"{c}_routed_ok"] is True, (r["name"], c, r["details"][c]["routing"])


def test_table_and_report(quick_run):
    data, stdout, md = quick_run
    for name in QUICK:
        assert name in stdout and f"| {name} |" in md
    assert "## Issue 11's rule" in md
    assert data["machine"]["torch"] in md
