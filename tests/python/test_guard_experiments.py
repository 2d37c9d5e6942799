"""The experiments of docs/guard-semantics.md hold on the running torch.

scripts/guard-experiments.py is run by this interpreter (without GUARDJIT,
so torch's own guards answer) and every experiment must give the result
committed for this release in docs/results/guard-experiments-<release>.json:
a torch that behaves otherwise, or an experiment changed without refreshing
the results, fails here. The doc's table must be the one --markdown makes
from the committed results. How to refresh both: docs/guard-semantics.md,
"Experiments per release".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "guard-experiments.py")
DOC = os.path.join(ROOT, "docs", "guard-semantics.md")
RELEASE = torch.__version__.split("+")[0]
COMMITTED = os.path.join(ROOT, "docs", "results", f"guard-experiments-{RELEASE}.json")


def _run(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDJIT")}
    p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=env,
                       timeout=180, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def test_every_experiment_gives_the_committed_result():
    assert os.path.exists(COMMITTED), \
        f"no {os.path.relpath(COMMITTED, ROOT)}: run the experiments on torch {RELEASE} (docs/porting.md, step 8)"
    with open(COMMITTED, encoding="utf-8") as f:
        committed = json.load(f)
    now = json.loads(_run("--json"))
    assert now["release"] == committed["release"] == RELEASE

    def rows(report):
        return {r["id"]: r for r in report["experiments"]}
    expected, got = rows(committed), rows(now)
    assert list(got) == list(expected), "experiments added, removed or reordered: refresh the committed results"
    differing = [f"{i}:\n  committed: {expected[i]}\n  now:       {got[i]}"
                 for i in expected if got[i] != expected[i]]
    assert not differing, "\n".join(differing)


def test_the_doc_table_is_the_generated_one():
    table = _run("--markdown")
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    begin, end = "<!-- guard-experiments:begin -->\n", "<!-- guard-experiments:end -->"
    assert begin in doc and end in doc
    assert doc.split(begin, 1)[1].split(end, 1)[0] == table, \
        "docs/guard-semantics.md is stale: scripts/guard-experiments.py --markdown --update docs/guard-semantics.md"
