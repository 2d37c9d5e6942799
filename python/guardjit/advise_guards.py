"""Step 2 of ``guardjit.advise``: where the guard time goes, per compile unit.

Dynamo's guards are read where torch hands them to a ``guard_filter_fn``
(``torch._dynamo.types.GuardFilterEntry``: source name and guard type): a
filter that keeps every guard records them per compile id, so the unit is
exactly the one plain ``guardjit.compile`` builds. Sources are shortened
(``._modules['layers']._modules['3']`` reads ``.layers[3]``) and grouped by
their first ``depth`` steps below the frame local; global guards
(``GLOBAL_STATE``, ``DEFAULT_DEVICE``, ...) form the group ``<global>``.

A group's ``cost_us`` is measured, not estimated: guardjit's check of the
unit (all units of the compile, as one call checks them) is timed
interleaved against the same model compiled with that group's guards
dropped (a filter), on the same frame locals; the difference is the group's
native time. ``dynamo_cost_us`` is the same difference for Dynamo's own tree,
and ``python_frames`` / ``accessor_reads`` the Python frames one check
enters (``sys.setprofile``, :mod:`guardjit.lab.frames`) and the attribute
reads through ``nn.Module.__getattr__`` or a transformers config's
``__getattribute__`` (decided natively or handed to CPython,
:func:`guardjit.pyattr.stats`), with the group against without it. That
needs one compile per group, so only the ``measure`` largest groups are
measured (None for the others). Every group counts its guards by what they
cost: ``hasattr_probes`` (``HASATTR``/``NO_HASATTR``), ``tensor_checks``
(tensor guards) and ``python_guards`` (guards that run a Python lambda).
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable
from typing import Any

import torch

import guardjit
from guardjit import _core, plugin
from guardjit.bench.capture import capture_units, fix_frame_locals
from guardjit.bench.corpus import BenchCase
from guardjit.bench.run import SideBackend, python_frames, subtree_skip
from guardjit.lab import timing

HASATTR_KINDS = ("HASATTR", "NO_HASATTR")


def counts(kinds: dict[str, int]) -> dict[str, int]:
    """A group's guards by what they cost (see the module's docstring)."""
    return {"hasattr_probes": sum(n for k, n in kinds.items() if k in HASATTR_KINDS),
            "tensor_checks": sum(n for k, n in kinds.items() if "TENSOR" in k),
            "python_guards": sum(n for k, n in kinds.items() if k in plugin._PYTHON_GUARDS)}


_STEP = re.compile(r"\._(?:modules|parameters|buffers)\[['\"]([^'\"]+)['\"]\]")
_TOKENS = re.compile(r"(\.[A-Za-z_][A-Za-z_0-9]*|\[[^\]]*\])")
GLOBAL = "<global>"


def readable(source: str) -> str:
    """``L['self']._modules['layers']._modules['3'].weight`` ->
    ``L['self'].layers[3].weight``."""
    def step(m: re.Match) -> str:
        key = m.group(1)
        return f"[{key}]" if key.isdigit() else f".{key}"
    return _STEP.sub(step, source)


def split(source: str) -> tuple[str, list[str]]:
    """The frame local or global (``L['x']``, ``G['torch']``) and the steps below it."""
    m = re.match(r"^((?:L|G)\[[^\]]*\]|[A-Za-z_][A-Za-z_0-9]*)(.*)$", source)
    if not m:
        return source, []
    return m.group(1), _TOKENS.findall(m.group(2))


def group_of(source: str, depth: int) -> str:
    if not source:
        return GLOBAL
    root, steps = split(readable(source))
    # A module's private attributes (its hook dicts, _parameters) belong to
    # the module's group.
    for i, step in enumerate(steps):
        if step.startswith("._"):
            steps = steps[:i]
            break
    return root + "".join(steps[:depth])


class Recorder:
    """A ``guard_filter_fn`` keeping what ``filter_fn`` (torch's form: the
    list of entries in, one bool each out) or ``choose`` (one entry) keeps,
    default every guard, recording per compile id the (source, guard type) of every
    guard it saw and of every guard it dropped."""

    def __init__(self, choose: Callable[[Any], bool] | None = None,
                 filter_fn: Callable[[list], list[bool]] | None = None) -> None:
        self.choose, self.filter_fn = choose, filter_fn
        self.seen: dict[str, list[tuple[str, str]]] = {}
        self.dropped: dict[str, list[tuple[str, str]]] = {}

    def snapshot(self) -> Recorder:
        """A copy of what was recorded so far (this one keeps recording)."""
        copy = Recorder(self.choose, self.filter_fn)
        copy.seen, copy.dropped = dict(self.seen), dict(self.dropped)
        return copy

    def __call__(self, entries: list) -> list[bool]:
        from torch._guards import CompileContext

        cid = str(CompileContext.current_compile_id())
        if self.filter_fn is not None:
            keep = [bool(k) for k in self.filter_fn(entries)]
        else:
            keep = [True if self.choose is None else bool(self.choose(e)) for e in entries]
        # torch may call the filter again for the same unit: the last call wins.
        self.seen[cid] = [(e.name, e.guard_type) for e in entries]
        self.dropped[cid] = [(e.name, e.guard_type) for e, k in zip(entries, keep) if not k]
        return keep


def _layers(groups: dict[str, collections.Counter]) -> dict[str, Any] | None:
    """The repeated container (``L['self'].layers``) with the most indices
    and the guards under each index: whether guard count grows per layer."""
    per: dict[str, dict[int, int]] = collections.defaultdict(dict)
    for source, kinds in groups.items():
        root, steps = split(source)
        for i, s in enumerate(steps):
            if s.startswith("[") and s[1:-1].isdigit():
                key = root + "".join(steps[:i])
                idx = int(s[1:-1])
                per[key][idx] = per[key].get(idx, 0) + sum(kinds.values())
                break
    if not per:
        return None
    container, counts = max(per.items(), key=lambda kv: len(kv[1]))
    if len(counts) < 2:
        return None
    return {"container": container, "count": len(counts),
            "guards_per_layer": [counts[i] for i in sorted(counts)]}


def _dynamo_name(source: str) -> str:
    """The IR's source of a guard as Dynamo names it to a guard filter: a
    frame local without ``L[...]`` (``L['self'].x`` -> ``self.x``)."""
    if source == "L":  # a global guard on the frame (TORCH_FUNCTION_MODE_STACK)
        return ""
    return re.sub(r"^L\[['\"]([^'\"]*)['\"]\]", r"\1", source)


def _group_facts(u: plugin.Unit, depth: int) -> dict[str, dict[str, Any]]:
    """What guardjit does with each group of a unit it checks: the group's
    guards in guardjit's checked set (``guards``), those that run a Python
    lambda (``python``) and, with subtree skipping, those still checked on a
    skipping call (``residual``; ``prelude``: the ones that may run Python,
    checked before validation) and the rest, ``skipped_while_unchanged``."""
    if u.ir is None:
        return {}
    out: dict[str, dict[str, Any]] = collections.defaultdict(
        lambda: {"guards": 0, "python": 0})
    for kind, source in u.ir.guard_sources():
        f = out[group_of(_dynamo_name(source), depth)]
        f["guards"] += 1
        f["python"] += kind in plugin._PYTHON_GUARDS
    sets = _core.skip_sets(u.check) if u.check is not None else None
    if sets is not None:
        for f in out.values():
            f.update(residual=0, prelude=0)
        for name, part in zip(("residual", "prelude"), sets):
            for _, source in part.guard_sources() if part is not None else ():
                f = out[group_of(_dynamo_name(source), depth)]
                f[name] = f.get(name, 0) + 1
        for f in out.values():
            f["skipped_while_unchanged"] = max(0, f["guards"] - f.get("residual", 0)
                                               - f.get("prelude", 0))
    return dict(out)


def _unit_facts(units: list[plugin.Unit], depth: int) -> dict[str, dict[str, Any]]:
    """What guardjit does with each unit (plugin.Unit, _core.skip_stats), and
    with each of its groups (:func:`_group_facts`)."""
    out: dict[str, dict[str, Any]] = {}
    for u in units:
        facts: dict[str, Any] = {"status": u.status, "reason": u.reason or None,
                                 "guardjit_guards": u.guards, "python_guards": u.python_guards,
                                 "python_kinds": None, "subtree_skip": None}
        if u.ir is not None:
            kinds = u.ir.count_by_kind()
            facts["python_kinds"] = {k: n for k, n in kinds.items()
                                     if k in plugin._PYTHON_GUARDS} or {}
        if u.check is not None:
            st = _core.skip_stats(u.check)
            if st:
                facts["subtree_skip"] = {
                    "skipped_while_unchanged": st["implied_guards"],
                    "residual": st["residual_guards"], "prelude": st["prelude_guards"],
                    "hits": st["hits"], "fallbacks": st["fallbacks"],
                    "disabled": st["disabled"]}
            else:
                facts["subtree_skip"] = {"declined": u.skip_declined or "no plan"}
        facts["by_group"] = _group_facts(u, depth)
        out[u.name] = facts
    return out


def _group_verdict(unit: dict[str, Any], f: dict[str, Any] | None) -> dict[str, Any]:
    """A group's ``guardjit`` field: its facts (:func:`_group_facts`) and
    ``how``, in words: "native", "skipped while unchanged", "residual",
    "Python", a mix ("12 skipped while unchanged, 3 residual"), "no guard of
    guardjit's set under this source" (its passes merged or implied them, or
    its IR names the source otherwise: sources are matched by name), or
    "left to Dynamo: <reason>" for a unit guardjit does not check."""
    if unit["status"] not in ("native", "interpreter"):
        return {"how": f"left to Dynamo: {unit.get('reason') or unit['status']}"}
    if not f or not f["guards"]:
        return {"guards": 0, "how": "no guard of guardjit's set under this source (its passes "
                                    "merged or implied them, or name them otherwise)"}
    parts = []
    if "skipped_while_unchanged" in f:
        for key, label in (("skipped_while_unchanged", "skipped while unchanged"),
                           ("residual", "residual"), ("prelude", "prelude")):
            if f.get(key):
                parts.append((f[key], label))
    else:
        parts.append((f["guards"] - f["python"], unit["status"]))
    if f["python"]:
        parts.append((f["python"], "Python"))
    parts = [(n, label) for n, label in parts if n]
    how = parts[0][1] if len(parts) == 1 else ", ".join(f"{n} {label}" for n, label in parts)
    return {**f, "how": how}


def _compile_timed(case: BenchCase, backend: str, tag: str,
                   choose: Callable[[Any], bool] | None,
                   skip: bool = False) -> tuple[Recorder, list, list]:
    """guardjit's compile with a Recorder filter; subtree skipping off
    unless ``skip`` (a group's native time is measured on the full check)."""
    rec = Recorder(choose)
    plugin.clear_units()
    args, kwargs = case.inputs()
    with subtree_skip(skip):
        model = guardjit.compile(case.model, backend=SideBackend(backend, tag),
                                 options={"guard_filter_fn": rec})
        with capture_units() as got:
            model(*args, **kwargs)
        model(*args, **kwargs)
    plugin.wait_for_tier_up()
    fix_frame_locals(case, got)
    return rec, got, plugin.units()


def _check_fn(captured: list, dynamo: bool = False) -> Callable[[], None]:
    pairs = [((c.dynamo_root if dynamo else c.final_root).check, c.f_locals) for c in captured]

    def run() -> None:
        for check, fl in pairs:
            check(fl)
    return run


def guard_groups(case: BenchCase, backend: str, depth: int, measure: int, rounds: int,
                 target_ms: float, tick: Callable[[str], None]) -> dict[str, Any]:
    torch._dynamo.reset()
    keep = plugin.config.keep_units
    plugin.config.keep_units = True
    # One cache entry per compile below, all on the same code.
    limit = torch._dynamo.config.patch(recompile_limit=max(64, measure + 8))
    limit.__enter__()
    try:
        tick("guards by source")
        rec, _, units = _compile_timed(case, backend, "guardjit-groups", None,
                                       skip=plugin.config.subtree_skip)
        facts = _unit_facts(units, depth)
        # No reset from here on: a reset frees the units whose checks are
        # timed. Each compile has a backend of its own (its own cache entry).
        _, captured, _ = _compile_timed(case, backend, "guardjit-full", None)
        full_check, full_dynamo = _check_fn(captured), _check_fn(captured, dynamo=True)
        full_frames = python_frames(captured)
        out_units = []
        by_group: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for cid, entries in rec.seen.items():
            groups: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
            for source, kind in entries:
                groups[group_of(source, depth)][kind] += 1
            for g, kinds in groups.items():
                by_group[g].update(kinds)
            unit = {"name": cid, "guards": len(entries), **facts.get(cid, {
                "status": "dynamo", "reason": "not offered to guardjit", "guardjit_guards": 0,
                "python_guards": 0, "python_kinds": None, "subtree_skip": None}),
                    "groups": [{"group": g, "guards": sum(k.values()), "kinds": dict(k),
                                **counts(k), "cost_us": None, "dynamo_cost_us": None,
                                "python_frames": None, "accessor_reads": None}
                               for g, k in sorted(groups.items(),
                                                  key=lambda kv: -sum(kv[1].values()))],
                    "layers": _layers(groups)}
            gj_groups = unit.pop("by_group", {})
            for grp in unit["groups"]:
                grp["guardjit"] = _group_verdict(unit, gj_groups.get(grp["group"]))
            out_units.append(unit)
        # The largest groups over all units: one compile each without them.
        ranked = sorted(by_group, key=lambda g: -sum(by_group[g].values()))
        costs: dict[str, dict[str, float]] = {}
        for i, g in enumerate(ranked[:measure]):
            tick(f"cost of {g[:40]}")
            try:
                _, cap_wo, _ = _compile_timed(
                    case, backend, f"guardjit-without-{i}",
                    lambda e, g=g: group_of(e.name, depth) != g)
                r = timing.interleaved(full_check, _check_fn(cap_wo), rounds=rounds,
                                       target_ms=target_ms)
                d = timing.interleaved(full_dynamo, _check_fn(cap_wo, dynamo=True),
                                       rounds=rounds, target_ms=target_ms)
                wo = python_frames(cap_wo)
                costs[g] = {"cost_us": r.a_us - r.b_us, "check_us": r.a_us,
                            "check_us_without": r.b_us, "dynamo_cost_us": d.a_us - d.b_us,
                            "python_frames": {
                                side: full_frames[f"python_frames_{side}"]
                                - wo[f"python_frames_{side}"] for side in ("dynamo", "guardjit")},
                            "accessor_reads": {
                                k: v - wo["python_accessor_reads"].get(k, 0)
                                for k, v in full_frames["python_accessor_reads"].items()}}
            except Exception as e:  # noqa: BLE001 - the group stays unmeasured
                costs[g] = {"cost_us": None, "error": f"{type(e).__name__}: {e}"}
        for unit in out_units:
            for grp in unit["groups"]:
                if grp["group"] in costs:
                    # Measured over every unit of the compile (one call checks them all).
                    grp.update(costs[grp["group"]])
            unit["top_groups"] = [g["group"] for g in unit["groups"][:10]]
        return {"depth": depth, "units": out_units, "measured_groups": ranked[:measure],
                "python_frames": {k: v for k, v in full_frames.items()
                                  if not k.endswith("_by_code")}}
    finally:
        limit.__exit__(None, None, None)
        plugin.config.keep_units = keep
        plugin.clear_units()
        torch._dynamo.reset()
