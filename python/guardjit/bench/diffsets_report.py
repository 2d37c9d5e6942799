"""Table, findings and Markdown report of ``--suite diffsets`` (rendered in docs/performance.md, differentiating sets)."""

from __future__ import annotations

from typing import Any

from guardjit.bench.diffsets import CONFIGS
from guardjit.bench.report import _table

POLICY = {"torch": "plain torch", "compatible": "torch-compatible", "minimal": "minimal",
          "guarded": "guarded-minimal"}


def _configs(data: dict[str, Any]) -> list[str]:
    ran = data.get("run", {}).get("configs")
    return [c for c in CONFIGS if ran is None or c in ran]


def _routed(r: dict[str, Any], c: str) -> str:
    d = r["details"].get(c) or {}
    if d.get("error"):
        return "error"
    rt = d.get("routing") or {}
    if r.get(f"{c}_routed_ok"):
        return "ok"
    return f"MISROUTED {rt.get('misrouted_calls', '?')}/{rt.get('calls', '?')}"


def _num(x: Any, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)


def _yes(v: bool | None) -> str:
    return "-" if v is None else "yes" if v else "NO"


def _rule_cell(r: dict[str, Any]) -> str:
    ru = r["rule"]
    if not ru["applies"]:
        return "n/a: torch misroutes"
    return (f"compat<=torch {_yes(ru['compatible_le_torch'])} "
            f"(IR {_yes(ru.get('compatible_le_torch_ir'))}), "
            f"min<=compat {_yes(ru['minimal_le_compatible'])}")


def table(data: dict[str, Any], markdown: bool = False) -> str:
    cfgs = _configs(data)
    head = ["scenario", "units"]
    for c in cfgs:
        head += [f"{c} guards", f"{c} µs", f"{c} routed"]
    head.append("rule (where torch routes ok)")
    rows = [tuple(head)]
    for r in data["scenarios"]:
        cells = [r["name"], _num(r.get("units"), "{}")]
        for c in cfgs:
            g = _num(r.get(f"{c}_guards"), "{}")
            if c == "torch" and r.get("torch_guards_ir") is not None:
                g += f" ({r['torch_guards_ir']} IR)"
            cells += [g, _num(r.get(f"{c}_lookup_us"), "{:.2f}"), _routed(r, c)]
        cells.append(_rule_cell(r))
        rows.append(tuple(cells))
    return _table(rows, markdown)


def done_when(data: dict[str, Any]) -> dict[str, Any]:
    """Issue 11's "Done when", as far as this suite measures it."""
    rows = data["scenarios"]
    policies = [c for c in _configs(data) if c != "torch"]
    not_routed = {c: [r["name"] for r in rows if r.get(f"{c}_routed_ok") is False]
                  for c in policies}
    torch_misroutes = [r["name"] for r in rows if r.get("torch_routed_ok") is False]
    bigger_c = [r["name"] for r in rows if r["rule"]["compatible_le_torch"] is False]
    bigger_ci = [r["name"] for r in rows if r["rule"].get("compatible_le_torch_ir") is False]
    bigger_m = [r["name"] for r in rows if r["rule"]["minimal_le_compatible"] is False]
    return {"every_policy_routes_every_scenario": all(not v for v in not_routed.values())
            and bool(policies),
            "not_routed": not_routed,
            "compatible_le_torch_everywhere_torch_routes": not bigger_c,
            "compatible_larger_than_torch": bigger_c,
            "compatible_le_torch_ir_everywhere_torch_routes": not bigger_ci,
            "compatible_larger_than_torch_ir": bigger_ci,
            "minimal_le_compatible_everywhere_torch_routes": not bigger_m,
            "minimal_larger_than_compatible": bigger_m,
            "torch_misroutes": torch_misroutes}


def findings(data: dict[str, Any], examples: int = 2) -> list[str]:
    """One line per misrouted scenario and outcome, with examples; the
    configurations with the same outcome share a line."""
    lines: dict[str, list[str]] = {}
    for r in data["scenarios"]:
        for c in _configs(data):
            d = r["details"].get(c) or {}
            if d.get("error"):
                lines.setdefault(f"{r['name']} [{{}}]: {d['error']}", []).append(POLICY[c])
                continue
            orc = d.get("oracle") or {}
            if orc and not orc.get("ok"):
                lines.setdefault(
                    f"{r['name']} [{{}}]: the replay WITHOUT the stance does not match the full "
                    f"lookup ({orc.get('misrouted_calls')} calls): the scenario, not the stance, "
                    "is broken", []).append(POLICY[c])
            rt = d.get("routing") or {}
            if r.get(f"{c}_routed_ok") or not rt:
                continue
            ex = []
            for m in rt.get("misroutes", [])[:examples]:
                what = (m["error"] if m["error"] else
                        f"served by {','.join(m['served']) or 'no graph'} instead of "
                        f"{m['expected']}" + ("" if m["result_ok"] else ", wrong result"))
                ex.append(f"input `{m['input']}` with cache order {' '.join(m['cache_order'])}: "
                          f"{what}")
            lines.setdefault(
                f"{r['name']} [{{}}]: {rt.get('misrouted_calls')} of {rt.get('calls')} calls "
                f"misrouted ({rt.get('wrong_entry')} wrong entry, {rt.get('wrong_result')} wrong "
                f"result, {rt.get('errors')} errors), e.g. " + "; ".join(dict.fromkeys(ex)),
                []).append(POLICY[c])
    return [k.format(", ".join(v)) for k, v in lines.items()]


def rule_facts(data: dict[str, Any]) -> list[str]:
    """Per scenario where ``torch-compatible`` is larger than torch: the units' counts."""
    out = []
    for r in data["scenarios"]:
        ru = r["rule"]
        if ru.get("compatible_le_torch") is not False and ru.get("compatible_le_torch_ir") is not False:
            continue
        t = {u["id"]: u for u in r["details"]["torch"].get("unit_records", [])}
        g = {u["id"]: u for u in r["details"]["compatible"].get("unit_records", [])}
        per = []
        for uid, u in g.items():
            tu = t.get(uid, {})
            per.append(f"{uid}: {u['diff_guards']} of {u.get('full_ir_guards')} "
                       f"(torch {tu.get('diff_guards')} guard objects = "
                       f"{tu.get('diff_ir_guards')} IR guards, of {tu.get('full_guards')})")
        unit = ("in one unit too" if ru.get("compatible_le_torch_ir") is False
                else f"only as the issue's fields count (in IR units {r['compatible_guards']} <= "
                     f"{r.get('torch_guards_ir')})")
        out.append(f"{r['name']}: torch-compatible {r['compatible_guards']} > torch "
                   f"{r['torch_guards']}, {unit}; per unit, torch-compatible's of its full set: "
                   + "; ".join(per))
    return out


ANALYSIS_BEGIN, ANALYSIS_END = "<!-- analysis -->", "<!-- /analysis -->"


def kept_analysis(path: str) -> str:
    """The hand-written block between the analysis markers of an existing report."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    i, j = text.find(ANALYSIS_BEGIN), text.find(ANALYSIS_END)
    return text[i:j + len(ANALYSIS_END)] if 0 <= i < j else ""


def policy_notes(data: dict[str, Any]) -> list[str]:
    """Which guardjit configurations did not take their policy."""
    out = []
    for c in _configs(data):
        if c == "torch":
            continue
        eff = {(r["details"].get(c) or {}).get("configuration", {}).get("policy_effective")
               for r in data["scenarios"]}
        if eff == {None}:
            out.append(f"{c}: guardjit ignored GUARDJIT_DIFFSET_POLICY="
                       f"{CONFIGS[c]['GUARDJIT_DIFFSET_POLICY']} (plugin.config has no "
                       "diffset_policy on this build)")
        elif eff != {CONFIGS[c]["GUARDJIT_DIFFSET_POLICY"]}:
            out.append(f"{c}: policy in effect {sorted(map(str, eff))}")
    return out


def format_text(data: dict[str, Any]) -> str:
    dw = done_when(data)
    parts = [table(data), ""]
    parts += [f"  {n}" for n in policy_notes(data)]
    parts += [f"  {f}" for f in findings(data)]
    parts.append(
        f"every policy routes every scenario: {'yes' if dw['every_policy_routes_every_scenario'] else 'NO'}; "
        f"compatible <= torch: {'yes' if dw['compatible_le_torch_everywhere_torch_routes'] else 'NO'} "
        f"(in IR units: {'yes' if dw['compatible_le_torch_ir_everywhere_torch_routes'] else 'NO'}); "
        f"minimal <= compatible: {'yes' if dw['minimal_le_compatible_everywhere_torch_routes'] else 'NO'}; "
        f"torch misroutes: {', '.join(dw['torch_misroutes']) or 'none'}")
    return "\n".join(parts)


def markdown_report(data: dict[str, Any], json_name: str = "diffsets.json",
                    analysis: str = "") -> str:
    """The report; ``analysis`` (a hand-written block between the analysis
    markers, kept from the previous report: :func:`kept_analysis`) goes after
    the findings."""
    m, run = data["machine"], data["run"]
    v = run.get("versions", {})
    dw = done_when(data)
    rev = run.get("guardjit_git") or "?"
    lines = [
        "# Differentiating sets under `skip_guard_eval_unsafe`: guardjit against torch",
        "",
        f"Measured {m.get('date')} on {m.get('lscpu Model name', m.get('cpu'))} "
        f"({m.get('cores')} cores, shared), Python {m.get('python')}, torch {m.get('torch')}, "
        f"LLVM {m.get('llvm')}, transformers {v.get('transformers')}; guardjit "
        f"`{rev[:10]}`{' (uncommitted changes)' if run.get('guardjit_git_dirty') else ''} "
        f"on branch `{run.get('guardjit_git_branch')}`"
        f"{'; --quick' if run.get('quick') else ''}; {run.get('wall_s', 0):.0f} s. "
        f"The numbers are in [{json_name}]({json_name}); "
        "`python -m guardjit bench --suite diffsets --json FILE --report FILE.md` "
        "regenerates both.",
        "",
        "Every scenario is one warm-up recipe (python/guardjit/bench/scenarios.py) run "
        "identically in four fresh processes: plain torch, and guardjit with "
        "`GUARDJIT_DIFFSET_POLICY=` `torch-compatible`, `minimal`, `guarded-minimal`.",
        "",
        "* **guards**: guards of every compile unit's differentiating root, summed over the "
        "units. torch: the leaf guards of each entry's `diff_guard_root` (one union of sources "
        "per code object, counted once per unit; epilogue guards included; no root counts 0). "
        "guardjit with its own differentiating sets: the guards of each unit's reduced Guard "
        "IR set (the IR counts a dict manager's type and size checks as guards, and the "
        "plugin's default pipeline has de-duplicated the set first); an entry left on "
        "Dynamo's path counts its full root, as torch's. A guardjit build without its own "
        "sets counts Dynamo's clone like torch's. The two conventions differ (torch counts "
        "a combined epilogue lambda of 16 `is` checks, or 5 dimension-marking checks, "
        "as one guard object), so the torch column also gives, in parentheses, torch's "
        "roots printed as TORCH_LOGS=guards prints them and read back by `guard-ir-opt "
        "--import=torch-logs -passes=default`: the same unit as the guardjit columns.",
        "* **µs**: the \"TorchDynamo Cache Lookup\" profiler event per call under the stance: "
        "per warmed input, the median of rounds of repeated calls (its entry at the front), "
        "then the mean over the inputs; the median of that over "
        f"{run.get('repeats', 1)} process(es) per configuration, run interleaved "
        "(0.00: torch's fast path for a lone guardless entry skips the lookup; `-`: every "
        "call raised). The columns come from different processes, not from one interleaved "
        "process: read them as rough (the JSON has each process's number and the per-input "
        "medians, and the lookup with the inputs in rotation, each call's entry at the back "
        "of the LRU cache).",
        "* **routed**: `ok` when, under the stance, every warmed input in every replayed order "
        "(all permutations up to 4 inputs, else 12 seeded ones; each hit moves its entry to "
        "the front) was served by the entry a full-guard lookup picks in the same cache "
        "order, with eager's result (python/guardjit/lab/routing.py); otherwise misrouted calls / "
        "calls.",
        "",
        table(data, markdown=True),
        "",
        "## Issue 11's rule",
        "",
        f"* All three policies route every warmed input in every scenario: "
        f"**{'yes' if dw['every_policy_routes_every_scenario'] else 'no'}**"
        + ("" if dw["every_policy_routes_every_scenario"] else " (not routed: "
           + "; ".join(f"{k}: {', '.join(n)}" for k, n in dw["not_routed"].items() if n) + ")"),
        f"* `torch-compatible` <= torch's count wherever torch routes correctly, counted in one "
        f"unit (torch's roots imported as Guard IR): "
        f"**{'yes' if dw['compatible_le_torch_ir_everywhere_torch_routes'] else 'no'}**"
        + (f" (larger on {', '.join(dw['compatible_larger_than_torch_ir'])})"
           if dw["compatible_larger_than_torch_ir"] else "")
        + f"; on the issue's fields as they are (Dynamo's guard objects against IR guards): "
        f"**{'yes' if dw['compatible_le_torch_everywhere_torch_routes'] else 'no'}**"
        + (f" (larger on {', '.join(dw['compatible_larger_than_torch'])})"
           if dw["compatible_larger_than_torch"] else ""),
        f"* `minimal` <= `torch-compatible` wherever torch routes correctly: "
        f"**{'yes' if dw['minimal_le_compatible_everywhere_torch_routes'] else 'no'}**"
        + (f" (larger on {', '.join(dw['minimal_larger_than_compatible'])})"
           if dw["minimal_larger_than_compatible"] else ""),
        f"* Scenarios where plain torch itself misroutes (the rule does not apply): "
        f"{', '.join(dw['torch_misroutes']) or 'none'}.",
        "",
    ]
    notes = policy_notes(data)
    found = findings(data) + rule_facts(data)
    if notes or found:
        lines += ["## Findings", ""]
        lines += [f"* {n}" for n in notes]
        lines += [f"* {f}" for f in found]
        lines.append("")
    if analysis:
        lines += [analysis, ""]
    lines += ["## Scenarios", ""]
    lines += [f"* `{r['name']}`: {r['description']}" for r in data["scenarios"]]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Re-renders a --suite diffsets JSON: ``python -m guardjit.bench.diffsets_report
    FILE.json [--report FILE.md]`` (the text table without --report)."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m guardjit.bench.diffsets_report")
    p.add_argument("json")
    p.add_argument("--report", metavar="FILE.md")
    args = p.parse_args(argv)
    with open(args.json) as f:
        data = json.load(f)
    if not args.report:
        print(format_text(data))
        return 0
    write_report(data, args.report, args.json)
    return 0


def write_report(data: dict[str, Any], path: str, json_path: str | None) -> None:
    """Writes the Markdown report, keeping the analysis block of the file it replaces."""
    import os

    rel = (os.path.relpath(json_path, os.path.dirname(os.path.abspath(path)))
           if json_path else "diffsets.json")
    text = markdown_report(data, json_name=rel, analysis=kept_analysis(path))
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    import sys

    sys.exit(main())
