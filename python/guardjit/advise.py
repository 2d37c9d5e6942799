"""``guardjit.advise`` and ``python -m guardjit advise``: torch's guide to guard overhead as one call.

In one process (docs/advise.md):

1. the cache lookup, guard check and whole call of plain ``torch.compile``,
   each option of torch's guide and guardjit, interleaved
   (:mod:`guardjit.advise_measure`);
2. where the guard time goes: per compile unit, guards grouped by source
   subtree and kind, the largest groups' measured native time, guards per
   repeated layer, and what guardjit does with the unit
   (:mod:`guardjit.advise_guards`);
3. which unsafe switch would bite for this model: the guards each drops and,
   over the warm-up inputs and changes of the model's state drawn from the
   fuzzer, where it serves a stale graph, shown against eager
   (:mod:`guardjit.advise_safety`).

Everything runs under ``torch.no_grad()`` with one intra-op thread (the
bench's serving setting).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import torch

SCHEMA = "guardjit-advise/1"
# The report's fields (docs/advise.md; the tests check every one).
REPORT_FIELDS = ("schema", "model", "backend", "torch_version", "guardjit_torch_version",
                 "settings", "warmup_inputs", "sides", "guardjit_vs_options", "guards", "layers",
                 "unsafe", "guardjit_stats", "wall_s")
SIDE_FIELDS = ("status", "lookup_us", "lookup_events_per_call", "pregraph_us", "check_us",
               "call_us", "call_ratio_vs_torch")
UNIT_FIELDS = ("name", "guards", "status", "reason", "guardjit_guards", "python_guards",
               "python_kinds", "subtree_skip", "groups", "top_groups", "layers")
GROUP_FIELDS = ("group", "guards", "kinds", "hasattr_probes", "tensor_checks", "python_guards",
                "cost_us", "dynamo_cost_us", "python_frames", "accessor_reads", "guardjit")
LAYER_FIELDS = ("container", "count", "guards_per_layer", "lookup_us_per_layer")
OPTION_FIELDS = ("dropped_guards", "dropped_by_group", "safe", "bites", "verdict")
BITE_FIELDS = ("change", "source", "shown", "dropped_guards_on_source")
CHANGE_FIELDS = ("change", "source", "steps", "eager_error", "judged", "sides")


@dataclasses.dataclass
class Settings:
    rounds: int = 7  # interleaved rounds (lookup, check, call, group cost)
    profile_calls: int = 30  # calls per profiler round
    target_ms: float = 2.0  # one batch per round takes about this
    depth: int = 2  # source steps below the frame local that name a group
    groups: int = 5  # largest groups whose native time is measured
    changes: int = 16  # changes of the model's state tried (plus the warm-up inputs)

    @classmethod
    def quick_mode(cls) -> Settings:
        return cls(rounds=3, profile_calls=20, target_ms=0.5, groups=3, changes=8)

    @classmethod
    def from_args(cls, args: Any) -> Settings:
        """The settings of ``python -m guardjit advise``: ``--quick``, then
        ``--depth``/``--groups``/``--changes``/``--rounds`` where given."""
        s = cls.quick_mode() if args.quick else cls()
        for field in ("depth", "groups", "changes", "rounds"):
            if getattr(args, field, None) is not None:
                setattr(s, field, getattr(args, field))
        return s


def _case(model: Any, args: tuple, kwargs: dict, name: str, layers: int | None) -> Any:
    from guardjit.bench.corpus import BenchCase

    return BenchCase(name, model, lambda: tuple(args), dict(kwargs), layers=layers)


def _speed_notes(sides: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per option of torch's guide: guardjit's default against it, and
    guardjit with the option against it (the lookup where all have one, else
    the whole call); ``..._over_option`` < 1 is faster."""
    from guardjit.advise_measure import GUARDJIT, GUIDE

    def ok(name: str) -> dict[str, Any]:
        s = sides.get(name, {})
        return s if s.get("status") == "ok" else {}

    out = {}
    for name in GUIDE:
        s, gj, both = ok(name), ok(GUARDJIT), ok(f"{GUARDJIT}+{name}")
        if not s:
            continue
        key = "lookup_us" if all(x.get("lookup_us") for x in (s, gj) if x) else "call_us"
        note: dict[str, Any] = {"measure": key, "option_us": s.get(key)}
        for label, side in (("guardjit", gj), ("guardjit_with_option", both)):
            v = side.get(key)
            note[f"{label}_us"] = v
            note[f"{label}_over_option"] = v / s[key] if v and s.get(key) else None
        if note["guardjit_over_option"] is not None \
                or note["guardjit_with_option_over_option"] is not None:
            out[name] = note
    return out


def advise(model: Any, example_inputs: Any, warmup_inputs: list | None = None, *,
           example_kwargs: dict | None = None, name: str | None = None,
           backend: str = "eager", layers: int | None = None, quick: bool = False,
           settings: Settings | None = None, progress: bool = False) -> dict[str, Any]:
    """Measures and explains the guard overhead of ``torch.compile(model)``.

    ``example_inputs``: the positional arguments of one call (a tuple, or
    one tensor); ``warmup_inputs``: more such argument tuples, compiled
    during warm-up and tried as changes (step 3); ``layers``: the number of
    repeated layers, for the lookup per layer (found from the guard sources
    when None). The model is mutated during step 3 and restored. Returns
    the report as a JSON-able dict (fields: docs/advise.md).
    """
    from guardjit import _core, _logging, plugin
    from guardjit.advise_guards import guard_groups
    from guardjit.advise_measure import SIDES, measure_sides
    from guardjit.advise_safety import assess
    from guardjit.bench.run import Progress

    s = settings or (Settings.quick_mode() if quick else Settings())
    from guardjit.advise_safety import buffers, fresh, restore

    # Copies: a forward that writes its input in place must not change the
    # caller's tensors.
    args = fresh(tuple(example_inputs) if isinstance(example_inputs, (tuple, list))
                 else (example_inputs,))
    warm = [fresh(tuple(w) if isinstance(w, (tuple, list)) else (w,))
            for w in (warmup_inputs or [])]
    example_kwargs = fresh(example_kwargs)
    case = _case(model, args, example_kwargs or {}, name or type(model).__name__, layers)
    # Ticks: each side's compile and the 3 timings; the groups; the changes.
    bar = Progress(len(SIDES) + 3 + 1 + s.groups + 2 + 2 * (s.changes + 2 + len(warm)),
                   progress)
    tick: Callable[[str], None] = bar
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    # Under GUARDJIT=1 (guardjit.install) every compile would be guardjit's,
    # the plain-torch sides included: only the guardjit sides are, here.
    route_all, plugin.config.route_all = plugin.config.route_all, False
    saved = buffers(model)  # calls in train mode update BatchNorm's statistics
    try:
        # The caller's random state is kept (a model in train mode draws).
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            sides = measure_sides(case, warm, backend, s.rounds, s.profile_calls, s.target_ms,
                                  tick)
            guards = guard_groups(case, backend, s.depth, s.groups, s.rounds, s.target_ms, tick)
            unsafe = assess(case, warm, backend, s.changes, tick)
    finally:
        restore(model, saved)
        plugin.config.route_all = route_all
        torch.set_num_threads(threads)
        bar.close(done=True)
    found = next((u["layers"] for u in guards["units"] if u["layers"]), None)
    count = layers or (found or {}).get("count")
    per_layer = {"container": (found or {}).get("container"), "count": count,
                 "guards_per_layer": (found or {}).get("guards_per_layer"),
                 "lookup_us_per_layer": {k: v["lookup_us"] / count for k, v in sides.items()
                                         if count and v.get("lookup_us")}}
    report = {"schema": SCHEMA, "model": case.name, "backend": backend,
              "torch_version": torch.__version__, "guardjit_torch_version": _core.TORCH_VERSION,
              "settings": dataclasses.asdict(s), "warmup_inputs": len(warm),
              "sides": sides, "guardjit_vs_options": _speed_notes(sides),
              "guards": guards, "layers": per_layer, "unsafe": unsafe,
              "guardjit_stats": {k: v for k, v in plugin.stats().items()
                                 if isinstance(v, (int, float, str))},
              "wall_s": time.perf_counter() - start}
    # tlparse lists it beside the compile it ran (TORCH_TRACE, docs/torch-tools.md).
    _logging.trace_artifact("guardjit_advise", lambda: json.dumps(report, default=str))
    return report


# --- the table for people ----------------------------------------------------------------

def _us(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}"


SIDE_LABELS = {"use_recursive_dict_tags_for_guards": "torch dict tags",
               "install_free_tensors+skip_guard_on_all_nn_modules_unsafe":
                   "torch free-tensors + skip-all-nn (unsafe)",
               "skip_guard_eval_unsafe": "torch skip_guard_eval_unsafe stance",
               "guardjit": "guardjit (default, sound)",
               "guardjit+use_recursive_dict_tags_for_guards": "guardjit + dict tags",
               "guardjit+install_free_tensors+skip_guard_on_all_nn_modules_unsafe":
                   "guardjit + free-tensors + skip-all-nn",
               "guardjit+skip_guard_eval_unsafe": "guardjit + the stance"}


def format_report(r: dict[str, Any]) -> str:
    out = [f"guardjit advise: {r['model']} (backend {r['backend']}, torch {r['torch_version']}, "
           f"{r['wall_s']:.0f} s; medians of interleaved rounds, one process)", "",
           "1. Per call (µs)",
           *([f"  ({r['settings'].get('rounds')} rounds: one slow round can move a median; "
              "the lookup and check columns hold better than the whole call)"]
             if (r.get("settings") or {}).get("rounds", 7) < 5 else []),
           f"  {'side':<42} {'lookup':>8} {'check':>8} {'pregraph':>8} {'call':>9} "
           f"{'call/torch':>10}"]
    for name, s in r["sides"].items():
        label = SIDE_LABELS.get(name, name)
        if s.get("status") != "ok":
            out.append(f"  {label[:42]:<42} error: {s.get('error')}")
            continue
        ratio = s.get("call_ratio_vs_torch")
        out.append(f"  {label[:42]:<42} {_us(s.get('lookup_us')):>8} {_us(s.get('check_us')):>8} "
                   f"{_us(s.get('pregraph_us')):>8} {_us(s.get('call_us')):>9} "
                   f"{'-' if ratio is None else f'{ratio:.2f}':>10}")
    for name, n in r["guardjit_vs_options"].items():
        what = n["measure"].replace("_us", "")
        rel = n.get("guardjit_over_option")
        if rel is not None:
            word = "faster than" if rel < 1 else "slower than"
            out.append(f"  guardjit's sound default: {rel:.2f}x the {what} of "
                       f"{SIDE_LABELS.get(name, name)} ({word} it, without its risk)")
        both = n.get("guardjit_with_option_over_option")
        if both is not None:
            with_label = SIDE_LABELS.get(f"guardjit+{name}", f"guardjit+{name}")
            out.append(f"  {with_label}: {both:.2f}x the {what} of "
                       f"{SIDE_LABELS.get(name, name)} (the option's risk stays)")
    out += ["", f"2. Where the guard time goes (groups: {r['guards']['depth']} source steps)"]
    for u in r["guards"]["units"]:
        skip = u.get("subtree_skip") or {}
        how = u.get("status", "?")
        if u.get("reason"):
            how += f" ({u['reason']})"
        if "skipped_while_unchanged" in skip:
            how += (f"; subtree skipping: {skip['skipped_while_unchanged']} guards skipped while "
                    f"unchanged, {skip['residual']} residual")
        if u.get("python_guards"):
            how += f"; {u['python_guards']} Python guards"
        out.append(f"  unit {u['name']}: {u['guards']} guards, guardjit: {how}")
        out.append(f"    {'group':<36} {'guards':>6} {'native µs':>9} {'Dynamo µs':>9} "
                   f"{'Dynamo frames':>13}  kinds; what guardjit does")
        for g in u["groups"][:10]:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(g["kinds"].items(),
                                                            key=lambda kv: -kv[1])[:3])
            frames = (g.get("python_frames") or {}).get("dynamo")
            name = g["group"] if len(g["group"]) <= 36 else g["group"][:35] + "…"
            out.append(f"    {name:<36} {g['guards']:>6} {_us(g.get('cost_us')):>9} "
                       f"{_us(g.get('dynamo_cost_us')):>9} {'-' if frames is None else frames:>13}"
                       f"  {kinds}; {(g.get('guardjit') or {}).get('how', '-')}")
    lay = r["layers"]
    if lay.get("count"):
        per = ", ".join(f"{SIDE_LABELS.get(k, k).split(' (')[0]} {v:.2f}"
                        for k, v in lay["lookup_us_per_layer"].items())
        where = (f"{lay['container']}, guards per layer {lay['guards_per_layer']}"
                 if lay["container"] else "layers as given")
        out.append(f"  {lay['count']} layers ({where}); lookup µs per layer: {per}")
    u = r["unsafe"]
    judged = sum(1 for c in u["changes"] if c.get("judged"))
    raised = sum(1 for c in u["changes"] if c["eager_error"]
                 and not c["eager_error"].startswith("not applicable"))
    out += ["", f"3. Which unsafe switch would bite ({len(u['changes'])} changes tried, "
                f"{judged} judged: plain torch agrees with eager there; eager raised on "
                f"{raised}; each side against eager)"]
    for name, o in r["unsafe"]["options"].items():
        drops = "-" if o["dropped_guards"] is None else o["dropped_guards"]
        out.append(f"  {name}: drops {drops} guards; {o['verdict']}")
    return "\n".join(out)


# --- the command line ------------------------------------------------------------------------

def load(spec: str, quick: bool) -> dict[str, Any]:
    """The model, inputs and repeated layers a MODULE:FACTORY gives (the
    forms ``python -m guardjit export`` takes: a ModelCase, a BenchCase or
    ``(model, args)``)."""
    from guardjit import models
    from guardjit.export import _accepts_quick, load_factory

    factory = load_factory(spec)
    made = factory(quick=quick) if quick and _accepts_quick(factory) else factory()
    if isinstance(made, models.ModelCase):
        return {"model": made.model, "example_inputs": made.make_input(), "name": made.name}
    if hasattr(made, "inputs") and hasattr(made, "model"):
        a, kw = made.inputs()
        return {"model": made.model, "example_inputs": a, "example_kwargs": kw,
                "name": made.name, "layers": getattr(made, "layers", None)}
    if isinstance(made, tuple) and len(made) == 2:
        return {"model": made[0], "example_inputs": tuple(made[1]),
                "name": spec.partition(":")[2]}
    raise ValueError(f"{spec}: expected a ModelCase, a BenchCase or (model, args), "
                     f"got {type(made).__name__}")


def main(args: Any, render: Callable[[dict[str, Any]], int] | None = None) -> int:
    try:
        got = load(args.factory, args.quick)
    except (ImportError, AttributeError, ValueError) as e:
        print(f"python -m guardjit advise: error: {e}", file=sys.stderr)
        return 2
    s = Settings.from_args(args)
    try:
        report = advise(**got, backend=args.backend, settings=s, progress=not args.no_progress)
    except ValueError as e:  # e.g. nothing to advise on: no compile unit
        print(f"python -m guardjit advise: error: {e}", file=sys.stderr)
        return 2
    if args.json != "-":  # with --json -, stdout is the JSON alone (pipeable)
        print(format_report(report))
    if args.json:
        text = json.dumps(report, indent=1, default=str)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return render(report) if render else 0  # --html, --plot: guardjit/advise_report.py


class _CallableModule(types.ModuleType):
    """``guardjit.advise(model, example_inputs)`` calls :func:`advise`:
    importing this submodule makes ``guardjit.advise`` the module, so the
    module itself is the call (``guardjit.advise.advise`` works too)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return advise(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
