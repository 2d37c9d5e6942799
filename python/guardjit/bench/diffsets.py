"""``python -m guardjit bench --suite diffsets``: differentiating sets against torch's.

Under ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)`` Dynamo's
cache lookup runs only each entry's differentiating root. This suite runs the
warm-up recipes of :mod:`guardjit.bench.scenarios` identically in four
configurations, each scenario and configuration in a fresh process
(:mod:`guardjit.bench.diffsets_worker`), so nothing leaks between them:

========== ====================================================================
torch      plain torch 2.13 (``GUARDJIT`` unset)
compatible ``GUARDJIT=1 GUARDJIT_DIFFSET_POLICY=torch-compatible``
minimal    ``GUARDJIT=1 GUARDJIT_DIFFSET_POLICY=minimal``
guarded    ``GUARDJIT=1 GUARDJIT_DIFFSET_POLICY=guarded-minimal``
========== ====================================================================

Per scenario and configuration: ``*_guards``, leaf guards of every unit's
differentiating root summed over the units; ``*_lookup_us``, the "TorchDynamo
Cache Lookup" µs per call under the stance (median of rounds per input, mean
over the warmed inputs; with ``--repeats N``, the median over N processes
per configuration, run interleaved); ``*_routed_ok``, every warmed input
served by the entry a full lookup picks, with eager's result, in every order
replayed (:mod:`guardjit.lab.routing`), in every process. The lookup numbers come
from different processes (not the same-process interleave of
docs/performance.md, "How it is measured": compare them as rough, not as ratios).

The rule of issue 11's "Done when", checked per scenario where torch routes
correctly: ``compatible_guards <= torch_guards`` and ``minimal_guards <=
compatible_guards``; where torch misroutes, the table says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

CONFIGS: dict[str, dict[str, str | None]] = {
    "torch": {"GUARDJIT": None, "GUARDJIT_DIFFSET_POLICY": None},
    "compatible": {"GUARDJIT": "1", "GUARDJIT_DIFFSET_POLICY": "torch-compatible"},
    "minimal": {"GUARDJIT": "1", "GUARDJIT_DIFFSET_POLICY": "minimal"},
    "guarded": {"GUARDJIT": "1", "GUARDJIT_DIFFSET_POLICY": "guarded-minimal"},
}
# The JSON fields of one scenario (the test checks them).
FIELDS = ("name", "units") + tuple(
    f"{c}_{k}" for c in CONFIGS for k in ("guards", "lookup_us", "routed_ok"))
WORKER_TIMEOUT_S = 900


def _env(config: str) -> dict[str, str]:
    env = dict(os.environ)
    for k, v in CONFIGS[config].items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_one(scenario: str, config: str, quick: bool) -> dict[str, Any]:
    """One scenario in one configuration, in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="guardjit-diffsets-") as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [sys.executable, "-m", "guardjit.bench.diffsets_worker", scenario, "--out", out]
        if quick:
            cmd.append("--quick")
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(config),
                                  timeout=WORKER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"error": f"worker timed out after {WORKER_TIMEOUT_S} s", "routed_ok": False}
        if proc.returncode != 0 or not os.path.exists(out):
            return {"error": f"worker exited with {proc.returncode}",
                    "stderr": proc.stderr[-3000:], "routed_ok": False}
        with open(out) as f:
            data = json.load(f)
        data["process_s"] = time.perf_counter() - start
    cfg = data.get("configuration", {})
    want_gj = CONFIGS[config]["GUARDJIT"] == "1"
    if bool(cfg.get("guardjit_installed")) != want_gj:
        # e.g. the autoload .pth could not import guardjit: the numbers
        # would be another configuration's.
        data["error"] = (f"guardjit {'not ' if want_gj else ''}installed in the "
                         f"{config} process")
        data["routed_ok"] = False
    return data


def git_revision() -> dict[str, Any]:
    """The revision of the checkout the bench runs from (the current directory)."""
    def git(*args: str) -> str | None:
        try:
            p = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    rev = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"guardjit_git": rev, "guardjit_git_dirty": bool(status) if status is not None
            else None, "guardjit_git_branch": git("rev-parse", "--abbrev-ref", "HEAD")}


def row(name: str, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's fields of one scenario, plus each configuration's details."""
    units = [r.get("units") for r in results.values() if r.get("units") is not None]
    out: dict[str, Any] = {"name": name, "units": units[0] if units else None}
    if len(set(units)) > 1:
        out["units_by_config"] = {c: r.get("units") for c, r in results.items()}
    for c in CONFIGS:  # a configuration not run has None everywhere
        r = results.get(c)
        out[f"{c}_guards"] = None if r is None else r.get("diff_guards")
        out[f"{c}_lookup_us"] = None if r is None else r.get("lookup_us")
        out[f"{c}_routed_ok"] = None if r is None else bool(r.get("routed_ok", False))
    t = results.get("torch") or {}
    # torch's roots in guardjit's units (Guard IR after the default pipeline):
    # the like-for-like comparison with the guardjit columns.
    out["torch_guards_ir"] = t.get("diff_ir_guards")
    desc = next((r["description"] for r in results.values() if r.get("description")), "")
    out["description"] = desc
    out["details"] = results
    out["rule"] = rule(out)
    return out


def rule(r: dict[str, Any]) -> dict[str, Any]:
    """Issue 11's size rule on one scenario (None where it does not apply).

    ``compatible_le_torch`` compares the issue's fields as they are (torch:
    Dynamo's leaf guard objects; guardjit: Guard IR guards);
    ``compatible_le_torch_ir`` compares in one unit (torch's roots imported
    as Guard IR, ``torch_guards_ir``).
    """
    t, c, m = r.get("torch_guards"), r.get("compatible_guards"), r.get("minimal_guards")
    ti = r.get("torch_guards_ir")
    applies = bool(r.get("torch_routed_ok"))

    def le(a: Any, b: Any) -> bool | None:
        return (a <= b) if applies and a is not None and b is not None else None
    return {"applies": applies, "compatible_le_torch": le(c, t),
            "compatible_le_torch_ir": le(c, ti), "minimal_le_compatible": le(m, c)}


def merge_repeats(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's result from its repeated processes.

    Details are the first process's; ``lookup_us`` the median over the
    processes (each already a median per input, mean over inputs);
    ``routed_ok`` holds only if it held in every process; guard counts must
    agree (they are recorded per process when they do not).
    """
    import statistics

    out = dict(reps[0])
    if len(reps) == 1:
        return out
    out["repeats"] = [{k: r.get(k) for k in ("lookup_us", "lookup_us_rotating", "routed_ok",
                                              "diff_guards", "error", "process_s")}
                      for r in reps]
    for key in ("lookup_us", "lookup_us_rotating"):
        vals = [r[key] for r in reps if r.get(key) is not None]
        out[key] = statistics.median(vals) if vals else None
        if vals:
            out[key + "_min"], out[key + "_max"] = min(vals), max(vals)
    out["routed_ok"] = all(bool(r.get("routed_ok")) for r in reps)
    if len({r.get("diff_guards") for r in reps}) > 1:
        out["diff_guards_differ"] = True
    errors = [r["error"] for r in reps if r.get("error")]
    if errors:
        out["error"] = errors[0]
    return out


def run(scenarios: list[str], configs: list[str], quick: bool = False,
        progress: bool = True, repeats: int = 1) -> dict[str, Any]:
    """Every scenario in every configuration, ``repeats`` fresh processes
    each, interleaved (torch, compatible, minimal, guarded, torch, ...)."""
    from guardjit.bench.report import environment
    from guardjit.bench.run import Progress

    bar = Progress(len(scenarios) * len(configs) * repeats, progress)
    start = time.perf_counter()
    rows = []
    try:
        for name in scenarios:
            reps: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
            for k in range(repeats):
                for c in configs:
                    bar(f"{name}: {c}" + (f" ({k + 1}/{repeats})" if repeats > 1 else ""))
                    reps[c].append(run_one(name, c, quick))
            rows.append(row(name, {c: merge_repeats(v) for c, v in reps.items()}))
    finally:
        bar.close()
    env = environment()
    env.update(git_revision())
    env["quick"] = quick
    env["repeats"] = repeats
    env["configs"] = {c: {k: v for k, v in CONFIGS[c].items() if v is not None} for c in configs}
    env["wall_s"] = time.perf_counter() - start
    return {"machine": env.pop("machine"), "run": env, "scenarios": rows}


def write_json(data: dict[str, Any], path: str) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=str)
        f.write("\n")
