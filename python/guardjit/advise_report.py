"""The plot and the HTML page of ``python -m guardjit advise`` (``--plot``, ``--html``).

Both read the report dict :func:`guardjit.advise.advise` returns (or its
saved ``--json``, :func:`load_json`) and nothing else, so a report is
rendered again without measuring again. Both are driven by the data: every
side the report has, every per-call field a side has (``*_us``), every
extra scalar count a group has; a missing field or a None value is drawn as
a gap or "-", never an error, so reports with more sides or fields than
this module knows still render.

* :func:`plot`: per side, the per-call µs of each measure (grouped bars,
  log scale when the values span more than a factor of 30); the measured
  native cost of the largest groups; guards per repeated layer (when the
  report found layers). PNG, SVG or PDF by the path's extension.
* :func:`html`: one self-contained page (the plot inline as a base64 PNG,
  no external assets): the settings, torch version, the verdict sentences
  and the three sections of the text report as tables. Every string taken
  from the report is escaped (guard sources hold quotes and brackets).
"""

from __future__ import annotations

import argparse
import base64
import html as _html
import io
import json
import math
import sys
from typing import Any

from guardjit.advise import SCHEMA, SIDE_LABELS, format_report

# Per-call fields drawn first, in this order; any other ``*_us`` field a
# side has follows them.
MEASURES = ("pregraph_us", "lookup_us", "check_us", "call_us")
MEASURE_LABELS = {"pregraph_us": "pre-graph bytecode", "lookup_us": "cache lookup event",
                  "check_us": "guard check", "call_us": "whole call"}
COLORS = {"pregraph_us": "#8172b2", "lookup_us": "#c44e52", "check_us": "#4c72b0",
          "call_us": "#55a868"}
EXTRA_COLORS = ("#dd8452", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd")
PLOT_FORMATS = ("png", "svg", "pdf")
# A side's fields shown as columns of the sides table after the measures, in
# this order; other scalar fields follow.
SIDE_COLUMNS = ("call_ratio_vs_torch", "lookup_events_per_call", "units")
GROUP_ROWS = 25  # groups per unit in the HTML table (the JSON has all)
TOP_COSTS = 12  # measured groups in the plot


def _num(v: Any) -> float | None:
    """v as a finite float, else None (missing, None, NaN, a string)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list:
    return v if isinstance(v, list) else []


def side_label(name: str) -> str:
    return SIDE_LABELS.get(name, name)


def measures(report: dict[str, Any]) -> list[str]:
    """The per-call fields any side of the report has a number for:
    :data:`MEASURES` first, then other ``*_us`` fields in first-seen order."""
    seen: list[str] = []
    for s in _dict(report.get("sides")).values():
        for k, v in _dict(s).items():
            if k.endswith("_us") and _num(v) is not None and k not in seen:
                seen.append(k)
    return [m for m in MEASURES if m in seen] + [m for m in seen if m not in MEASURES]


def measured_group_costs(report: dict[str, Any]) -> list[tuple[str, str, float, float | None]]:
    """(unit, group, cost_us, dynamo_cost_us) of every group with a measured
    cost, largest guardjit cost first."""
    out = []
    for u in _list(_dict(report.get("guards")).get("units")):
        for g in _list(_dict(u).get("groups")):
            cost = _num(_dict(g).get("cost_us"))
            if cost is not None:
                out.append((str(u.get("name", "?")), str(g.get("group", "?")), cost,
                            _num(_dict(g).get("dynamo_cost_us"))))
    return sorted(out, key=lambda t: -t[2])


# --- the plot ------------------------------------------------------------------------------

def _tex_safe(s: str) -> str:
    """Text matplotlib draws as is: a pair of '$' would start mathtext."""
    return s.replace("$", r"\$")


def _figure(report: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sides = _dict(report.get("sides"))
    names = list(sides)
    ms = measures(report)
    costs = measured_group_costs(report)[:TOP_COSTS]
    units = {u for u, _, _, _ in costs}
    lay = _dict(report.get("layers"))
    per_layer = [_num(v) for v in _list(lay.get("guards_per_layer"))]
    panels = ["sides"] + (["costs"] if costs else []) + (
        ["layers"] if any(v is not None for v in per_layer) else [])
    rows = {"sides": max(len(names), 1) * max(len(ms), 1) * 0.22 + 1.0,
            "costs": len(costs) * 0.3 + 0.9, "layers": 2.2}
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, sum(rows[p] for p in panels) + 0.8),
                             gridspec_kw={"height_ratios": [rows[p] for p in panels]},
                             squeeze=False)
    axes = [a[0] for a in axes]
    for ax, panel in zip(axes, panels):
        ax.grid(axis="x", which="both", alpha=0.3)
        if panel == "sides":
            _sides_panel(ax, sides, names, ms)
        elif panel == "costs":
            labels = [_tex_safe(f"{u}: {g}" if len(units) > 1 else g) for u, g, _, _ in costs]
            ys = list(range(len(costs)))
            bars = [("guardjit (native)", [c for _, _, c, _ in costs], "#4c72b0", -0.18),
                    ("Dynamo's tree", [d for _, _, _, d in costs], "#c44e52", 0.18)]
            for label, values, color, dy in bars:
                if all(v is None for v in values):
                    continue
                yy = [y + dy for y in ys]
                ax.barh(yy, [v or 0 for v in values], 0.34, color=color, label=label)
                for y, v in zip(yy, values):  # a negative cost is noise: drawn, labelled left
                    if v is not None:
                        ax.text(v, y, f" {v:.2f}" if v >= 0 else f"{v:.2f} ", va="center",
                                fontsize=7, ha="left" if v >= 0 else "right")
            ax.set_yticks(ys, labels, fontsize=8)
            ax.invert_yaxis()
            ax.axvline(0, color="black", linewidth=0.6)
            ax.legend(fontsize=7, loc="lower right")
            ax.set_title("measured cost of the largest groups, µs per check "
                         "(check minus check without the group)", fontsize=9)
        else:
            xs = list(range(len(per_layer)))
            ax.bar(xs, [v if v is not None else 0 for v in per_layer], 0.6, color="#55a868")
            where = _tex_safe(str(lay.get("container") or "layer"))
            ax.set_xticks(xs, [f"{where}[{i}]" for i in xs], fontsize=8,
                          rotation=30 if len(xs) > 6 else 0)
            ax.grid(axis="y", alpha=0.3)
            ax.grid(axis="x", visible=False)
            ax.set_title(f"guards per repeated layer ({len(xs)} layers)", fontsize=9)
    settings = _dict(report.get("settings"))
    fig.suptitle(_tex_safe(
        f"guardjit advise: {report.get('model', '?')} (backend {report.get('backend', '?')}, "
        f"torch {report.get('torch_version', '?')}; medians of {settings.get('rounds', '?')} "
        f"interleaved rounds, one process; lower is better)"), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig, plt


def _sides_panel(ax: Any, sides: dict, names: list[str], ms: list[str]) -> None:
    ys = list(range(len(names)))
    h = 0.8 / max(len(ms), 1)
    values = []
    gaps = []  # (y, text) of a bar not drawn on an ok side: no number, or not > 0
    extra = iter(EXTRA_COLORS * 4)
    for i, m in enumerate(ms):
        vals = [_num(_dict(sides[n]).get(m)) for n in names]
        off = [y - 0.4 + h * (i + 0.5) for y in ys]
        shown = [(y, v) for y, v in zip(off, vals) if v is not None and v > 0]
        gaps += [(y, "none" if v is None else f"{v:.3g}") for y, v, n in zip(off, vals, names)
                 if (v is None or v <= 0) and _dict(sides[n]).get("status") in (None, "ok")]
        ax.barh([y for y, _ in shown], [v for _, v in shown], h,
                label=MEASURE_LABELS.get(m, m), color=COLORS.get(m) or next(extra))
        for y, v in shown:
            ax.text(v, y, f" {v:.3g}", va="center", fontsize=6.5)
        values += [v for _, v in shown]
    labels = []
    for n in names:
        s = _dict(sides[n])
        bad = s.get("status") not in (None, "ok")
        labels.append(_tex_safe(side_label(n) + (f" ({s.get('status')})" if bad else "")))
    ax.set_yticks(ys, labels, fontsize=8)
    ax.invert_yaxis()
    if values and max(values) / min(values) > 30:
        ax.set_xscale("log")
        ax.set_xlim(min(values) / 2, max(values) * 4)
    elif values:
        ax.set_xlim(0, max(values) * 1.2)
    else:
        ax.text(0.5, 0.5, "no side has a measurement", transform=ax.transAxes, ha="center")
    for y, text in gaps:
        ax.text(ax.get_xlim()[0], y, f" {text}", va="center", fontsize=6.5, color="#666")
    ax.set_title("per call, µs (log scale)" if ax.get_xscale() == "log" else "per call, µs",
                 fontsize=9)
    if ms:
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1), fontsize=7)


def plot(report: dict[str, Any], path: str) -> None:
    """Writes the report's figure to `path`, PNG, SVG or PDF by its
    extension (needs matplotlib). Raises ValueError for another extension."""
    fmt = path.rpartition(".")[2].lower()
    if fmt not in PLOT_FORMATS:
        raise ValueError(f"{path}: the plot is written as {', '.join(PLOT_FORMATS)} "
                         f"(by the file's extension)")
    fig, plt = _figure(report)
    try:
        fig.savefig(path, format=fmt, dpi=110)
    finally:
        plt.close(fig)


def png_bytes(report: dict[str, Any]) -> bytes:
    fig, plt = _figure(report)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=100)
    finally:
        plt.close(fig)
    return buf.getvalue()


# --- the page ------------------------------------------------------------------------------

def _e(v: Any) -> str:
    """v as escaped HTML text: numbers rounded, None as '-', containers as JSON."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.3g}" if abs(v) < 0.01 and v else f"{v:.2f}"
    if isinstance(v, (dict, list)):
        v = json.dumps(v, default=str)
    return _html.escape(str(v))


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """A table of already escaped cells (the head is escaped here)."""
    out = [f'<table class="{cls}">' if cls else "<table>",
           "<tr>" + "".join(f"<th>{_html.escape(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _kinds(kinds: Any) -> str:
    items = sorted(_dict(kinds).items(), key=lambda kv: -(_num(kv[1]) or 0))
    return ", ".join(f"{_e(k)} {_e(n)}" for k, n in items)


def verdicts(report: dict[str, Any]) -> list[str]:
    """The report's sentences, unescaped: guardjit against each option, then
    each option's verdict."""
    out = []
    for name, n in _dict(report.get("guardjit_vs_options")).items():
        rel = _num(_dict(n).get("guardjit_over_option"))
        if rel is None:
            continue
        word = "faster than" if rel < 1 else "slower than"
        out.append(f"guardjit's sound default is {rel:.2f}x the {n.get('measure')} of {name} "
                   f"({word}, without its risk)")
    for name, o in _dict(_dict(report.get("unsafe")).get("options")).items():
        if _dict(o).get("verdict") is not None:
            out.append(f"{name}: {o['verdict']}")
    return out


def _sides_section(report: dict[str, Any]) -> str:
    sides = _dict(report.get("sides"))
    ms = measures(report)
    extra: list[str] = []
    for s in sides.values():
        for k, v in _dict(s).items():
            if (k not in ms and k not in SIDE_COLUMNS and k not in extra
                    and k not in ("status", "error") and not isinstance(v, (dict, list))):
                extra.append(k)
    cols = [c for c in SIDE_COLUMNS if any(c in _dict(s) for s in sides.values())] + extra
    rows = []
    for name, s in sides.items():
        s = _dict(s)
        status = _e(s.get("status"))
        if s.get("error") is not None:
            status += f": {_e(s['error'])}"
        rows.append([f"{_e(side_label(name))}<br><code>{_e(name)}</code>", status]
                    + [_e(s.get(m)) for m in ms + cols])
    head = ["side", "status"] + [f"{MEASURE_LABELS.get(m, m)} µs" if m in MEASURE_LABELS
                                 else m for m in ms] + cols
    return _table(head, rows, "num")


def _unit_section(u: dict) -> str:
    skip = _dict(u.get("subtree_skip"))
    facts = [["guards (Dynamo's entries)", _e(u.get("guards"))],
             ["guardjit", _e(u.get("status")) + (f" ({_e(u['reason'])})" if u.get("reason")
                                                 else "")],
             ["leaf guards guardjit checks", _e(u.get("guardjit_guards"))],
             ["Python guards", _e(u.get("python_guards"))
              + (f" ({_kinds(u.get('python_kinds'))})" if _dict(u.get("python_kinds")) else "")],
             ["subtree skipping", ", ".join(f"{_e(k)} {_e(v)}" for k, v in skip.items())
              or "-"]]
    known = {"group", "guards", "cost_us", "check_us", "check_us_without", "kinds", "python_frames",
             "accessor_reads", "guardjit"}
    groups = [_dict(g) for g in _list(u.get("groups"))]
    extra: list[str] = []
    for g in groups:
        extra += [k for k, v in g.items() if k not in known and k not in extra
                  and not isinstance(v, (dict, list))]
    def frames(g: dict) -> str:
        f = _dict(g.get("python_frames"))
        return f"{_e(f.get('dynamo'))} / {_e(f.get('guardjit'))}" if f else "-"

    rows = [[f"<code>{_e(g.get('group'))}</code>", _e(g.get("guards")), _e(g.get("cost_us")),
             _e(g.get("check_us")), _e(g.get("check_us_without"))]
            + [_e(g.get(k)) for k in extra]
            + [frames(g), _e(_dict(g.get("guardjit")).get("how", "-")), _kinds(g.get("kinds"))]
            for g in groups[:GROUP_ROWS]]
    more = (f"<p>{len(groups) - GROUP_ROWS} smaller groups are in the JSON.</p>"
            if len(groups) > GROUP_ROWS else "")
    return (f"<h3>unit {_e(u.get('name'))}</h3>\n" + _table(["", ""], facts, "facts")
            + "\n" + _table(["group", "guards", "native µs", "check µs", "check µs without"]
                            + extra + ["Python frames (Dynamo / guardjit)",
                                       "what guardjit does", "kinds"], rows, "num") + more)


def _layers_section(report: dict[str, Any]) -> str:
    lay = _dict(report.get("layers"))
    if not lay.get("count"):
        return "<p>No repeated layers found.</p>"
    per = _dict(lay.get("lookup_us_per_layer"))
    rows = [[_e(side_label(k)), _e(v)] for k, v in per.items()]
    where = (f"<code>{_e(lay['container'])}</code>, guards per layer "
             f"{_e(lay.get('guards_per_layer'))}" if lay.get("container") else "layers as given")
    return (f"<p>{_e(lay['count'])} layers ({where}).</p>\n"
            + _table(["side", "lookup µs per layer"], rows, "num"))


def _bites(o: dict) -> str:
    items = []
    for b in _list(o.get("bites")):
        b = _dict(b)
        dropped = _list(b.get("dropped_guards_on_source"))
        items.append(f"<li><code>{_e(b.get('change'))}</code>: {_e(b.get('shown'))}"
                     + (f"<br><small>dropped: {', '.join(_e(d) for d in dropped)}</small>"
                        if dropped else "") + "</li>")
    return f"<ul>{''.join(items)}</ul>" if items else "-"


def _short(v: Any, n: int = 90) -> str:
    """v escaped, cut to n characters; the whole text in the tooltip."""
    text = str(v)
    if len(text) <= n:
        return _e(text)
    return f'<span title="{_e(text)}">{_e(text[:n])}…</span>'


def _change_cell(s: Any) -> str:
    s = _dict(s)
    if not s:
        return "-"
    same, error = s.get("same_as_eager"), s.get("error")
    if same:
        text = "as eager" + (f" (raises {_short(error)})" if error else "")
    elif same is False:
        text = f"raises {_short(error)}" if error else "differs"
    else:
        text = "-"
    if s.get("same_after_undo") is False:
        text += "; and back: differs"
    cls = "ok" if same and s.get("same_after_undo") is not False else "bad"
    return f'<span class="{cls}">{text}</span>'


def _unsafe_section(report: dict[str, Any]) -> str:
    u = _dict(report.get("unsafe"))
    opts = _dict(u.get("options"))
    rows = []
    for name, o in opts.items():
        o = _dict(o)
        safe = o.get("safe")
        cls = "ok" if safe else "bad" if safe is False else ""
        dropped = _dict(o.get("dropped_by_group"))
        rows.append([f"<code>{_e(name)}</code>", _e(o.get("dropped_guards")),
                     _e(o.get("added_guards")) if "added_guards" in o else "-",
                     f'<span class="{cls}">{_e(o.get("verdict"))}</span>'
                     + (f"<br><small>{_e(o['note'])}</small>" if o.get("note") else ""),
                     _bites(o),
                     ", ".join(f"<code>{_e(k)}</code> {_e(v)}" for k, v in dropped.items())
                     or "-"])
    changes = [_dict(c) for c in _list(u.get("changes"))]
    sides: list[str] = []
    for c in changes:
        sides += [k for k in _dict(c.get("sides")) if k not in sides]
    crow = [[f"<code>{_e(c.get('change'))}</code>", f"<code>{_e(c.get('source'))}</code>",
             _short(c.get("eager_error")) if c.get("eager_error") else "runs"]
            + [_change_cell(_dict(c.get("sides")).get(s)) for s in sides] for c in changes]
    return (_table(["option", "dropped guards", "added guards", "verdict", "bites (change: shown)",
                    "dropped by group"], rows)
            + f"\n<h3>The changes tried ({len(changes)}, "
              f"{_e(u.get('changes_run_in_eager'))} run in eager)</h3>\n"
            + _table(["change", "source", "eager"] + sides, crow, "changes"))


STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:.6em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;vertical-align:top;text-align:left}
th{background:#f2f2f2}table.num td{font-variant-numeric:tabular-nums}
table.facts th{display:none}code{font-size:12px}.ok{color:#1a7f37}.bad{color:#b42318}
img{max-width:100%;border:1px solid #eee}small{color:#555}"""


def page(report: dict[str, Any], figure: bytes | None = None) -> str:
    """The HTML page of the report; `figure` is the PNG embedded (None:
    drawn here when matplotlib is installed, else left out with a note)."""
    if figure is None:
        try:
            figure = png_bytes(report)
        except ImportError:
            figure = None
    settings = _dict(report.get("settings"))
    wall = _num(report.get("wall_s"))
    head = (f"guardjit advise: {report.get('model', '?')} (backend {report.get('backend', '?')}, "
            f"torch {report.get('torch_version', '?')}"
            + (f", {wall:.0f} s" if wall is not None else "")
            + "; medians of interleaved rounds, one process)")
    about = [["model", _e(report.get("model"))], ["backend", _e(report.get("backend"))],
             ["torch", _e(report.get("torch_version"))],
             ["torch guardjit was built against", _e(report.get("guardjit_torch_version"))],
             ["warm-up inputs", _e(report.get("warmup_inputs"))],
             ["schema", _e(report.get("schema"))], ["wall time, s", _e(report.get("wall_s"))]]
    about += [[f"settings: {_e(k)}", _e(v)] for k, v in settings.items()]
    guards = _dict(report.get("guards"))
    units = [_dict(u) for u in _list(guards.get("units"))]
    n_changes = len(_list(_dict(report.get("unsafe")).get("changes")))
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(head)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_e(head)}</h1>",
        "<h2>Verdicts</h2><ul>" + "".join(f"<li>{_e(v)}</li>" for v in verdicts(report))
        + "</ul>",
        (f'<img alt="per-call µs per side, measured group costs, guards per layer" '
         f'src="data:image/png;base64,{base64.b64encode(figure).decode("ascii")}">'
         if figure else "<p>(no plot: matplotlib is not installed)</p>"),
        "<h2>1. Per call (µs)</h2>", _sides_section(report),
        f"<h2>2. Where the guard time goes (groups: {_e(guards.get('depth'))} source steps)</h2>",
        "<p>Measured groups: " + (", ".join(f"<code>{_e(g)}</code>" for g in
                                            _list(guards.get("measured_groups"))) or "-") + "</p>",
        *(_unit_section(u) for u in units),
        "<h3>Repeated layers</h3>", _layers_section(report),
        f"<h2>3. Which unsafe switch would bite ({n_changes} changes tried)</h2>",
        _unsafe_section(report),
        "<h2>Run</h2>", _table(["", ""], about, "facts"),
        "<p><small>Written by <code>python -m guardjit advise</code> (docs/advise.md). "
        "&quot;Safe on everything tried&quot; is about the changes tried, not a proof.</small></p>",
        "</body></html>", ""]
    return "\n".join(parts)


def html(report: dict[str, Any], path: str) -> None:
    """Writes the report as one self-contained HTML page to `path`."""
    text = page(report)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def load_json(path: str) -> dict[str, Any]:
    """A report saved with ``--json``. Raises ValueError with the reason
    when the file cannot be read, is not JSON or is not an advise report."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a JSON text file") from None
    try:
        report = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON: {e.msg} (line {e.lineno}, column {e.colno})") \
            from None
    from guardjit.advise_script import SCHEMA as SCRIPT_SCHEMA

    script_family = SCRIPT_SCHEMA.rpartition("/")[0] + "/"
    if isinstance(report, dict) and str(report.get("schema", "")).startswith(script_family):
        if not isinstance(report.get("targets"), list):
            raise ValueError(f"{path}: the script report has no 'targets'")
        return report
    family = SCHEMA.rpartition("/")[0] + "/"
    if not isinstance(report, dict) or not str(report.get("schema", "")).startswith(family):
        got = report.get("schema") if isinstance(report, dict) else type(report).__name__
        raise ValueError(f"{path} is not a guardjit advise report (schema {got!r}, "
                         f"expected {SCHEMA!r} or {SCRIPT_SCHEMA!r})")
    if not isinstance(report.get("sides"), dict):
        raise ValueError(f"{path}: the report has no 'sides'")
    return report


# --- the command line (python -m guardjit advise) ------------------------------------------

def render(report: dict[str, Any], args: Any) -> int:
    """--html and --plot: 0, or 2 without matplotlib."""
    for flag, write in (("html", html), ("plot", plot)):
        path = getattr(args, flag, None)
        if not path:
            continue
        try:
            write(report, path)
        except ImportError as e:
            print(f"python -m guardjit advise: error: --{flag} needs matplotlib ({e})",
                  file=sys.stderr)
            return 2
        print(f"wrote {path}", file=sys.stderr)
    return 0


def from_json_main(args: Any) -> int:
    """--from-json: the table, --html and --plot of a saved report, measuring nothing."""
    try:
        report = load_json(args.from_json)
    except ValueError as e:
        print(f"python -m guardjit advise: error: {e}", file=sys.stderr)
        return 2
    if "targets" in report:  # a script's report: each advised target, as the run wrote them
        from guardjit.advise_script import _per_target

        done = [t for t in report["targets"] if isinstance(t, dict)
                and isinstance(t.get("report"), dict)]
        if not done:
            print(f"python -m guardjit advise: error: {args.from_json}: no target was advised",
                  file=sys.stderr)
            return 2
        worst = 0
        for t in done:
            print(f"\n=== target {t.get('target')} ({t.get('calls')} calls)")
            paths = argparse.Namespace(
                html=_per_target(getattr(args, "html", None), str(t.get("target")),
                                 len(done) > 1),
                plot=_per_target(getattr(args, "plot", None), str(t.get("target")),
                                 len(done) > 1))
            worst = max(worst, _table_and_render(t["report"], paths))
        return worst
    return _table_and_render(report, args)


def _table_and_render(report: dict[str, Any], args: Any) -> int:
    try:
        print(format_report(report))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        print(f"python -m guardjit advise: the text table needs a complete report "
              f"({type(e).__name__}: {e}); writing --html/--plot only", file=sys.stderr)
    return render(report, args)


__all__ = ["plot", "html", "page", "png_bytes", "load_json", "measures", "measured_group_costs",
           "verdicts", "render", "from_json_main"]
