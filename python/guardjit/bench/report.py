"""Table, JSON and plot of ``python -m guardjit bench``."""

from __future__ import annotations

import json
import statistics
import subprocess
from typing import Any

import torch

from guardjit.bench.options import FILTERS, LABELS, OPTIONS, STANCE, UNSAFE


def environment() -> dict[str, Any]:
    """machine (guardjit.lab.demo.machine() plus lscpu) and library versions."""
    from guardjit.lab import demo

    machine = demo.machine()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "L2 cache", "L3 cache", "CPU(s)",
                               "Thread(s) per core"):
                machine["lscpu " + key.strip()] = value.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    versions = {"torch": torch.__version__}
    try:
        import transformers

        versions["transformers"] = transformers.__version__
    except ImportError:
        versions["transformers"] = None
    import guardjit

    versions["guardjit"] = guardjit.__version__
    return {"machine": machine, "versions": versions}



def run_record(settings: Any, start: float) -> dict[str, Any]:
    """{"machine": ..., "run": ...} of a bench run that started at `start`
    (time.perf_counter()) with dataclass `settings`, one intra-op thread."""
    import dataclasses
    import time

    env = environment()
    env["settings"] = dataclasses.asdict(settings)
    env["torch_threads"] = 1
    env["wall_s"] = time.perf_counter() - start
    return {"machine": env.pop("machine"), "run": env}

def _f(x: Any, fmt: str = "{:.2f}") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x != x:
        return "nan"
    return fmt.format(x)


def _x(x: Any) -> str:
    return _f(x, "{:.1f}x")


def _spread(m: dict[str, Any], key: str) -> str:
    r = m.get(key)
    lo, hi = m.get(key + "_min"), m.get(key + "_max")
    if r is None:
        return "-"
    if lo is None or hi is None:
        return _x(r)
    return f"{r:.1f}x ({lo:.1f}-{hi:.1f})"


def _table(rows: list[tuple[str, ...]], markdown: bool) -> str:
    if markdown:
        out = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join("---" for _ in rows[0]) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return "\n".join(out)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _status(m: dict[str, Any]) -> str:
    if m.get("status") in (None, "native"):
        return "native"
    return f"{m.get('status')} {m.get('units_native', 0)}/{m.get('units', 0)}"


def _overhead(m: dict[str, Any]) -> str:
    """guardjit's whole call over the floor's, as a percentage with spread."""
    r = m.get("call_overhead_vs_floor")
    if r is None:
        return "-"
    lo, hi = m.get("call_overhead_vs_floor_min"), m.get("call_overhead_vs_floor_max")
    pct = f"{(r - 1) * 100:+.1f}%"
    return pct if lo is None or hi is None else \
        f"{pct} ({(lo - 1) * 100:+.1f}..{(hi - 1) * 100:+.1f})"


def main_table(data: dict[str, Any], markdown: bool = False) -> str:
    head = ("model", "layers", "guards", "guardjit", "Dynamo check µs", "guardjit µs",
            "check ratio", "cold ratio", "lookup µs torch", "lookup µs guardjit",
            "lookup µs unsafe", "lookup ratio", "lookup µs/layer guardjit", "call µs torch",
            "call µs guardjit", "floor call µs", "guardjit call vs floor", "JIT ms",
            "Python frames Dynamo / guardjit")
    rows = [head]
    for m in data["models"]:
        rows.append((m["name"], _f(m.get("layers"), "{}"), _f(m.get("guards"), "{}"),
                     _status(m), _f(m.get("dynamo_check_us")), _f(m.get("guardjit_check_us")),
                     _spread(m, "ratio"), _x(m.get("cold_ratio")),
                     _f(m.get("lookup_us_torch")), _f(m.get("lookup_us_guardjit")),
                     _f(m.get("lookup_us_unsafe")), _spread(m, "lookup_ratio"),
                     _f(m.get("lookup_per_layer_us")),
                     _f(m.get("call_us_torch"), "{:.1f}"), _f(m.get("call_us_guardjit"), "{:.1f}"),
                     _f(m.get("floor_call_us"), "{:.1f}"), _overhead(m),
                     _f(m.get("compile_ms"), "{:.1f}"),
                     f"{_f(m.get('python_frames_dynamo'), '{}')} / "
                     f"{_f(m.get('python_frames_guardjit'), '{}')}"))
    return _table(rows, markdown)


def options_table(data: dict[str, Any], markdown: bool = False) -> str:
    """Per option: guards, and Dynamo µs / guardjit µs of the check."""
    head = ("model",) + tuple(LABELS[o] for o in OPTIONS)
    rows = [head]
    for m in data["models"]:
        cells = [m["name"]]
        for o in OPTIONS:
            e = (m.get("options") or {}).get(o) or {}
            if o == STANCE:
                cells.append("lookup " + _f(e.get("lookup_us_torch")) + " / "
                             + _f(e.get("lookup_us_guardjit")) if e.get("status") == "ok"
                             else e.get("status", "-"))
                continue
            if o == UNSAFE:
                cells.append(f"check {_f(e.get('check_us'))} / {_f(e.get('guardjit_check_us'))}"
                             f", lookup {_f(e.get('lookup_us'))} / "
                             f"{_f(e.get('guardjit_lookup_us'))}" if e.get("status") == "ok"
                             else e.get("status", "-"))
                continue
            if e.get("status") == "error":
                cells.append("error")
                continue
            tag = "" if e.get("status") == "native" else f" [{e.get('status')}]"
            cells.append(f"{_f(e.get('guards'), '{}')}g {_f(e.get('dynamo_check_us'))} / "
                         f"{_f(e.get('guardjit_check_us'))}{tag}")
        rows.append(tuple(cells))
    return _table(rows, markdown)


def skip_table(data: dict[str, Any], markdown: bool = False) -> str:
    """Subtree skipping (issue 14): guardjit's default check and lookup
    against its full check and lookup, and torch's with its dict tags, with
    both unsafe options, and with no guards (whole call: torch serves that
    lookup outside the profiler event)."""
    head = ("model", "guardjit check µs default / full", "skip x", "skip hits",
            "lookup µs default / full", "torch dict-tags check / lookup",
            "torch unsafe check / lookup", "torch no guards: check µs, call µs vs guardjit")
    rows = [head]
    for m in data["models"]:
        o = m.get("options") or {}
        dt, un, sa = (o.get("use_recursive_dict_tags_for_guards") or {}, o.get(UNSAFE) or {},
                      o.get("skip_all_guards_unsafe") or {})
        floor = (f"{_f(sa.get('check_us'))}, {_f(sa.get('call_us'), '{:.1f}')} vs "
                 f"{_f(sa.get('call_us_guardjit'), '{:.1f}')}" if sa.get("lookup_us") is None
                 else f"{_f(sa.get('check_us'))}, lookup {_f(sa.get('lookup_us'))}")
        rows.append((m["name"],
                     f"{_f(m.get('guardjit_check_us'))} / {_f(m.get('guardjit_full_check_us'))}",
                     _spread(m, "skip_check_speedup"), _f(m.get("skip_hits"), "{}"),
                     f"{_f(m.get('lookup_us_guardjit'))} / {_f(m.get('lookup_us_guardjit_full'))}",
                     f"{_f(dt.get('check_us'))} / {_f(dt.get('lookup_us'))}",
                     f"{_f(un.get('check_us'))} / {_f(un.get('lookup_us'))}", floor))
    return _table(rows, markdown)


def _per_layer(data: dict[str, Any], key: str) -> float | None:
    """µs per added layer of ``key`` from stack-8 to stack-64."""
    by = {m["name"]: m for m in data["models"]}
    a, b = (by.get("stack-8") or {}).get(key), (by.get("stack-64") or {}).get(key)
    return (b - a) / 56 if a is not None and b is not None else None


def skip_summary(data: dict[str, Any]) -> dict[str, Any]:
    """Issue 14's targets, from one run."""
    by = {m["name"]: m for m in data["models"]}
    s64 = (by.get("stack-64") or {}).get("skip_check_speedup")
    # Both from the one interleave of the default and the full check (the
    # default's number beside Dynamo's differs: another interleave).
    slope_skip = _per_layer(data, "guardjit_default_check_us_vs_full")
    slope_full = _per_layer(data, "guardjit_full_check_us")
    slower_than_unsafe = []
    for m in data["models"]:
        un = (m.get("options") or {}).get(UNSAFE) or {}
        if un.get("status") != "ok":
            continue
        if un["check_us"] < un["guardjit_check_us"]:
            slower_than_unsafe.append(f"{m['name']} check")
        if un["lookup_us"] < un["guardjit_lookup_us"]:
            slower_than_unsafe.append(f"{m['name']} lookup")
    floor = {}
    for m in data["models"]:
        sa = (m.get("options") or {}).get("skip_all_guards_unsafe") or {}
        if sa.get("call_us") and sa.get("call_us_guardjit"):
            floor[m["name"]] = {"call_us_no_guards": sa["call_us"],
                                "call_us_guardjit": sa["call_us_guardjit"],
                                "guardjit_over_floor_us": sa["call_us_guardjit"] - sa["call_us"]}
    return {"stack64_skip_check_speedup": s64,
            "per_layer_us_default": slope_skip, "per_layer_us_full": slope_full,
            "slower_than_torch_unsafe": slower_than_unsafe,
            "no_guards_floor_whole_call": floor,
            "targets": {
                "stack-64 skip >= 5x": bool(s64 and s64 >= 5),
                "per-layer cost <= 1/5 of full": bool(slope_skip is not None and slope_full
                                                      and slope_skip <= slope_full / 5),
                "no slower than torch unsafe (check and lookup, every model)":
                    not slower_than_unsafe,
            }}


def users_summary(data: dict[str, Any]) -> dict[str, Any]:
    """Issue 26's figures in users' terms, from one run: guardjit's whole
    call over the floor (skip_all_guards_unsafe) and its lookup against
    torch's unsafe options, per model; the 36-layer transformers model's
    lookup against plain torch's."""
    overhead = {m["name"]: m.get("call_overhead_vs_floor") for m in data["models"]}
    measured = {k: v for k, v in overhead.items() if v is not None}
    above_unsafe = [m["name"] for m in data["models"]
                    if m.get("lookup_us_unsafe") is not None
                    and m.get("lookup_us_guardjit") is not None
                    and m["lookup_us_guardjit"] > m["lookup_us_unsafe"]]
    deep = [m for m in data["models"] if m["name"].startswith("qwen3-")]
    q = deep[0] if deep else {}
    q_gj, q_torch, q_unsafe = (q.get(k) for k in ("lookup_us_guardjit", "lookup_us_torch",
                                                  "lookup_us_unsafe"))
    return {"call_overhead_vs_floor": overhead,
            "max_call_overhead_vs_floor": max(measured.values()) if measured else None,
            "lookup_above_unsafe": above_unsafe,
            "qwen3": {"name": q.get("name"), "layers": q.get("layers"),
                      "lookup_us_guardjit": q_gj, "lookup_us_torch": q_torch,
                      "lookup_us_unsafe": q_unsafe},
            "targets": {
                "whole call within 2 % of the floor (every model)":
                    bool(measured) and max(measured.values()) <= 1.02,
                "lookup no higher than torch unsafe (every model)":
                    bool(measured) and not above_unsafe,
                "36-layer lookup <= 25 µs, >= 40x below torch, below unsafe":
                    bool(q.get("layers") == 36 and q_gj and q_torch and q_unsafe
                         and q_gj <= 25 and q_torch / q_gj >= 40 and q_gj < q_unsafe),
            }}


def passes_table(data: dict[str, Any], markdown: bool = False) -> str:
    """Per model: guards and guardjit check µs as recorded, after the default
    pipeline and after each filter pass (+ default); and the guide's
    combination, Dynamo's filtered tree µs / guardjit µs."""
    head = (("model", "recorded", "default") + tuple(LABELS[f] for f in FILTERS)
            + ("free-tensors+skip-all-nn: Dynamo / guardjit",))
    rows = [head]
    for m in data["models"]:
        p = m.get("passes") or {}
        if p.get("status") != "ok":
            rows.append((m["name"],) + (p.get("status", "-"),) + ("",) * (len(head) - 2))
            continue

        def cell(k: str) -> str:
            e = p.get(k) or {}
            return f"{_f(e.get('guards'), '{}')}g {_f(e.get('us'))}"
        g = p.get(UNSAFE) or {}
        guide = (f"{_f(g.get('guards'), '{}')}g {_f(g.get('dynamo_check_us'))} / "
                 f"{_f(g.get('guardjit_check_us'))}" if g.get("status") != "error" else "error")
        rows.append((m["name"], cell("none"), cell("default"))
                    + tuple(cell(f) for f in FILTERS) + (guide,))
    return _table(rows, markdown)


def summary(data: dict[str, Any]) -> dict[str, Any]:
    """Headline numbers against the issue's targets (default options only)."""
    ms = [m for m in data["models"] if m.get("ratio")]
    ratios = [m["ratio"] for m in ms]
    lk = [m["lookup_ratio"] for m in data["models"] if m.get("lookup_ratio")]
    native = [m for m in ms if m.get("status") == "native"]
    out = {
        "models": len(data["models"]),
        "models_native": len(native),
        "median_check_ratio": statistics.median(ratios) if ratios else None,
        "min_check_ratio": min(ratios) if ratios else None,
        "median_check_ratio_native": (statistics.median([m["ratio"] for m in native])
                                      if native else None),
        "median_lookup_ratio": statistics.median(lk) if lk else None,
        "min_lookup_ratio": min(lk) if lk else None,
    }
    # guardjit's sound figures against torch with both unsafe options.
    un = [(m.get("options") or {}).get(UNSAFE) or {} for m in data["models"]]
    uc = [u["check_ratio"] for u in un if u.get("status") == "ok" and u.get("check_ratio")]
    ul = [u["lookup_ratio"] for u in un if u.get("status") == "ok" and u.get("lookup_ratio")]
    out["median_check_ratio_vs_unsafe"] = statistics.median(uc) if uc else None
    out["median_lookup_ratio_vs_unsafe"] = statistics.median(ul) if ul else None
    out["python_frames"] = {m["name"]: [m.get("python_frames_dynamo"),
                                        m.get("python_frames_guardjit")]
                            for m in data["models"]}
    out["subtree_skip"] = skip_summary(data)
    out["users_terms"] = users_summary(data)
    out["targets"] = {
        "median check >= 10x": bool(out["median_check_ratio"] and out["median_check_ratio"] >= 10),
        "every model check >= 3x": bool(out["min_check_ratio"] and out["min_check_ratio"] >= 3),
        "lookup >= 5x lower": bool(out["median_lookup_ratio"]
                                   and out["median_lookup_ratio"] >= 5),
    }
    return out


def format_text(data: dict[str, Any]) -> str:
    s = summary(data)
    parts = [main_table(data), "",
             "guard check with each option: guards, Dynamo µs / guardjit µs "
             "(stance: cache lookup µs, torch / guardjit; last column: torch with both "
             "unsafe options / guardjit with none, check and lookup µs)",
             options_table(data), "",
             "subtree skipping: guardjit's default (skipping on) against its full check, and "
             "torch's options that skip guards",
             skip_table(data), "",
             "guardjit's passes on the recorded IR: guards, guardjit check µs (filters run "
             "with the default pipeline after them)",
             passes_table(data), ""]
    for m in data["models"]:
        for r in m.get("fallback_reasons") or []:
            parts.append(f"  {m['name']}: a compile unit stayed on Dynamo's path: {r}")
        for k, v in (m.get("errors") or {}).items():
            parts.append(f"  {m['name']}: {k} failed: {v}")
        for o, e in (m.get("options") or {}).items():
            if e.get("status") == "error":
                parts.append(f"  {m['name']} [{o}]: {e.get('error')}")
    parts.append(
        f"median check ratio {_x(s['median_check_ratio'])}, min {_x(s['min_check_ratio'])}; "
        f"median lookup ratio {_x(s['median_lookup_ratio'])}; "
        f"{s['models_native']}/{s['models']} models fully native")
    u = s["users_terms"]
    worst = u["max_call_overhead_vs_floor"]
    parts.append("guardjit's whole call over the floor (no guards): at most "
                 + ("-" if worst is None else f"{(worst - 1) * 100:+.1f}%")
                 + "; lookup above torch's unsafe options on: "
                 + (", ".join(u["lookup_above_unsafe"]) or "none"))
    return "\n".join(parts)


def write_json(data: dict[str, Any], path: str) -> None:
    data = dict(data)
    data["summary"] = summary(data)
    with open(path, "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.write("\n")


def plot(data: dict[str, Any], path: str) -> None:
    """Per-call guard check (hot) and cache lookup by model, torch vs guardjit, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m in data["models"] if m.get("dynamo_check_us")]
    names = [m["name"] + ("" if m.get("status") == "native" else "*") for m in models]
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.55 * len(models) + 2.2), sharey=True)
    panels = (("guard check, µs per call (hot)", "dynamo_check_us", "guardjit_check_us",
               "ratio"),
              ('"TorchDynamo Cache Lookup", µs per call', "lookup_us_torch",
               "lookup_us_guardjit", "lookup_ratio"))
    ys = list(range(len(models)))
    h = 0.38
    for ax, (title, ka, kb, kr) in zip(axes, panels):
        a = [m.get(ka) or float("nan") for m in models]
        b = [m.get(kb) or float("nan") for m in models]
        ax.barh([y - h / 2 for y in ys], a, h, label="torch.compile (Dynamo)", color="#c44e52")
        ax.barh([y + h / 2 for y in ys], b, h, label="guardjit", color="#4c72b0")
        ax.set_xscale("log")
        ax.set_title(title)
        ax.grid(axis="x", which="both", alpha=0.3)
        for y, m, va, vb in zip(ys, models, a, b):
            r = m.get(kr)
            if r and vb == vb:
                ax.text(max(va, vb) * 1.15, y, f"{r:.1f}x", va="center", fontsize=9)
        lo = min(v for v in a + b if v == v and v > 0)
        hi = max(v for v in a + b if v == v)
        ax.set_xlim(lo / 2, hi * 6)
    axes[0].set_yticks(ys, names)
    axes[0].invert_yaxis()
    axes[0].legend(loc="lower right", fontsize=9)
    mach = data.get("machine", {})
    fig.suptitle(f"guardjit vs Dynamo, per call (lower is better) — {mach.get('date', '')}, "
                 f"{mach.get('cpu', '')}, torch {mach.get('torch', '')}", fontsize=10)
    fig.text(0.01, 0.005, "* a compile unit stayed on Dynamo's path (see fallback_reasons); "
             "ratio = median of interleaved per-round ratios", fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["environment", "main_table", "options_table", "skip_table", "summary",
           "users_summary", "format_text", "write_json", "plot"]
