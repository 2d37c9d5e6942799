"""Step 3 of ``guardjit.advise``: which unsafe switch would bite, for this model.

For each of torch's ``guard_filter_fn`` filters, ``install_free_tensors``,
``use_recursive_dict_tags_for_guards`` and the ``skip_guard_eval_unsafe``
stance:

1. **The guards it drops.** A filter is wrapped in a recording filter
   (``advise_guards.Recorder``): the guards torch hands it and the ones it
   returns False for, by source and type. ``install_free_tensors``: the
   guards of a keep-all recording with the option minus those without it.
   Dict tags drop nothing when the guards are built (they skip a dict's
   subtree while its tag is unchanged); the stance checks only the guards
   that tell the code's cache entries apart.
2. **Changes tried.** The warm-up inputs, and changes of the model's own
   state drawn from the fuzzer's mutations (:mod:`guardjit.fuzz.mutations`:
   ``Step``/``apply``/``Undo``, addressed by the Dynamo sources of the
   unit's own guards): constant attributes set to another value, a
   parameter's ``requires_grad_`` flipped, ``train()``, the module moved to
   float64 (the inputs too), the last entry of a module list deleted,
   constant globals the forward reads, grad mode.
3. **Demonstration.** Each change is applied, the model is called in eager,
   with plain ``torch.compile``, with guardjit and with each option, and
   undone. An option *bites* on a change where its output differs from
   eager's (or it raises where eager does not) while plain torch's output
   equals eager's: it served a stale graph.
"""

from __future__ import annotations

import collections
import gc
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

import guardjit
from guardjit.advise_guards import Recorder, readable
from guardjit.bench.corpus import BenchCase
from guardjit.bench.options import FILTERS, STANCE
from guardjit.bench.run import SideBackend
from guardjit.fuzz import mutations as mut

DICT_TAGS = "use_recursive_dict_tags_for_guards"
FREE_TENSORS = "install_free_tensors"
OPTIONS = FILTERS + (FREE_TENSORS, DICT_TAGS, STANCE)


class Change:
    """One thing tried: fuzzer steps on the model's state and/or other inputs."""

    def __init__(self, label: str, source: str, steps: list[mut.Step],
                 inputs: Callable[[tuple], tuple] | None = None) -> None:
        self.label, self.source, self.steps, self.inputs = label, source, steps, inputs


def _globals_of(code: Any) -> dict:
    for ref in gc.get_referrers(code):
        if isinstance(ref, types.FunctionType) and ref.__code__ is code:
            return ref.__globals__
    return {}


def _literal_other(v: Any) -> str | None:
    """A literal of the same type with another value (from the fuzzer's list)."""
    if isinstance(v, bool):
        return repr(not v)
    if isinstance(v, int):
        return repr(v + 1)
    if isinstance(v, float):
        return repr(v * 2 + 1)
    return None


def _pattern(source: str) -> str:
    import re

    return re.sub(r"\[\d+\]", "[*]", readable(source))


def draw_changes(seen: list[tuple[str, str]], env: mut.Env, warmup: list[tuple],
                 limit: int) -> list[Change]:
    """Changes of the model's state addressed by the unit's guard sources
    (``seen``: (source, guard type)), one per source pattern (``layers[*]``),
    the categories taken in turn; then the warm-up inputs."""
    by_cat: dict[str, list[Change]] = collections.defaultdict(list)
    patterns: set[str] = set()
    locals_ = set(env.f_locals) - {"self"}
    for source, kind in seen:
        if not source or source.split("[")[0].split(".")[0] in locals_:
            continue  # global state, or an input (not the model's state)
        pat = _pattern(source)
        if pat in patterns:
            continue
        try:
            value = env.eval(source)
        except Exception:  # noqa: BLE001 - not evaluable here: not drawn
            continue
        step: mut.Step | None = None
        cat = ""
        if kind in ("CONSTANT_MATCH", "EQUALS_MATCH") and _literal_other(value) is not None:
            step, cat = mut.Step("set", source, _literal_other(value)), \
                "attribute" if source.startswith("self") else "globals"
        elif (kind == "TENSOR_MATCH" and isinstance(value, torch.nn.Parameter)
              and value.is_floating_point()):
            step, cat = mut.Step("t.requires_grad", source), "requires_grad_"
            pat = "requires_grad_"
        elif (kind in ("DICT_KEYS_MATCH", "DICT_LENGTH") and source.endswith("._modules")
              and len(value) >= 2 and all(str(k).isdigit() for k in value)):
            step, cat = mut.Step("d.del", source, repr(list(value)[-1])), "list edit"
        if step is None or pat in patterns:
            continue
        patterns.add(pat)
        by_cat[cat].append(Change(f"{readable(source)} = {step.arg}" if step.op == "set"
                                  else f"{step.op} {readable(source)}" +
                                  (f" {step.arg}" if step.arg else ""),
                                  readable(source), [step]))
    if "self" in env.f_locals and isinstance(env.f_locals["self"], torch.nn.Module):
        by_cat["train"].append(Change("self.train()", "self.training",
                                      [mut.Step("m.train", "self")]))
        if all(p.dtype == torch.float32 for p in env.f_locals["self"].parameters()):
            by_cat["dtype"].append(Change(
                "self.to(float64), inputs too", "self (dtype)",
                [mut.Step("m.to", "self", "float64")],
                lambda args: tuple(a.double() if isinstance(a, torch.Tensor)
                                   and a.is_floating_point() else a for a in args)))
    by_cat["grad mode"].append(Change("torch.set_grad_enabled(flip)", "<global> GRAD_MODE",
                                      [mut.Step("g.grad", "")]))
    for changes in by_cat.values():
        # Shorter sources first: the model's own attributes and the module's
        # own globals before what they reach through imports.
        changes.sort(key=lambda c: len(c.source))
    out: list[Change] = []
    cats = [c for c in ("attribute", "requires_grad_", "train", "dtype", "list edit", "globals",
                        "grad mode") if by_cat[c]]
    while len(out) < limit and any(by_cat[c] for c in cats):
        for c in cats:
            if by_cat[c] and len(out) < limit:
                out.append(by_cat[c].pop(0))
    for i, args in enumerate(warmup):
        out.append(Change(f"warm-up input {i}", "<inputs>", [], lambda _a, args=args: args))
    return out


def _same(a: Any, b: Any, exact: bool) -> bool:
    la, lb = pytree.tree_leaves(a), pytree.tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if not (torch.equal(x, y) if exact else torch.allclose(x, y, rtol=1e-4, atol=1e-5,
                                                                   equal_nan=True)):
                return False
        elif x != y:
            return False
    return True


class _Side:
    def __init__(self, name: str, case: BenchCase, backend: str, tag: str = "") -> None:
        self.name = name
        self.config: dict = {}
        self.recorder = Recorder()
        opts: dict = {"guard_filter_fn": self.recorder}
        if name in FILTERS:
            self.recorder = Recorder(filter_fn=getattr(torch.compiler, name))
            opts = {"guard_filter_fn": self.recorder}
        elif name in (FREE_TENSORS, DICT_TAGS):
            self.config = {name: True}
        be = SideBackend(backend, f"advise-{name}{tag}")
        self.model = (guardjit.compile(case.model, backend=be, options=opts) if name == "guardjit"
                      else torch.compile(case.model, backend=be, options=opts))

    def __call__(self, args: tuple, kwargs: dict) -> Any:
        with torch._dynamo.config.patch(**self.config):
            if self.name == STANCE:
                with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
                    return self.model(*args, **kwargs)
            return self.model(*args, **kwargs)


def _module_of(model: Any) -> torch.nn.Module | None:
    """The module whose buffers a call may update: the model, or the module a
    bound method (``model.forward``) belongs to."""
    owner = getattr(model, "__self__", model)
    return owner if isinstance(owner, torch.nn.Module) else None


def buffers(model: Any) -> dict[str, torch.Tensor]:
    """Copies of the buffers of :func:`_module_of` (BatchNorm's running
    statistics change on every call in train mode)."""
    m = _module_of(model)
    return {k: b.detach().clone() for k, b in m.named_buffers()} if m is not None else {}


def restore(model: Any, saved: dict[str, torch.Tensor]) -> None:
    m = _module_of(model)
    if not saved or m is None:
        return
    with torch.no_grad():
        for k, b in m.named_buffers():
            if k in saved and b.shape == saved[k].shape:
                b.copy_(saved[k])


def verdict_of(bites: list[dict[str, Any]], tried: int, unjudged: int = 0) -> str:
    """The option's verdict in words, from its bites; ``tried``: the changes
    judged, ``unjudged``: those where plain torch itself differed from eager."""
    if not bites:
        more = (f"; {unjudged} more not judged: plain torch differs from eager there"
                if unjudged else "")
        return f"safe on everything tried ({tried} changes{more})"

    def what(b: dict[str, Any]) -> str:
        return b["change"] if b["source"] == "<inputs>" else b["source"]

    # A stale graph answers; a side that raises refused to answer.
    stale = [what(b) + (" (and back)" if "undone" in b["shown"] else
                            " (eager raises)" if b["shown"].startswith("answers") else "")
             for b in bites if not b["shown"].startswith("raises")]
    fails = [b for b in bites if b["shown"].startswith("raises")]
    parts = []
    if stale:
        shown = "output differs from eager"
        if any(x.endswith("(eager raises)") for x in stale):
            shown += "; where marked, eager raises and it answers"
        parts.append(f"serves a stale graph when {', '.join(stale)} "
                     f"change{'s' if len(stale) == 1 else ''} (shown: {shown})")
    if fails:
        parts.append(f"fails when {', '.join(what(b) for b in fails)} "
                     f"change{'s' if len(fails) == 1 else ''} ({fails[0]['shown']})")
    return "; ".join(parts)


def _run(side: Any, args: tuple, kwargs: dict) -> tuple[Any, str | None]:
    try:
        return side(args, kwargs), None
    except Exception as e:  # noqa: BLE001 - an error is an answer too
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"


def _drops(sides: dict[str, _Side], seen: list[tuple[str, str]],
           free_seen: list[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in FILTERS:
        dropped = [d for v in sides[name].recorder.dropped.values() for d in v]
        out[name] = {"dropped_guards": len(dropped), "dropped": dropped}
    left = collections.Counter(free_seen)
    dropped = []
    for g in seen:
        if left[g]:
            left[g] -= 1
        else:
            dropped.append(g)
    out[FREE_TENSORS] = {"dropped_guards": len(dropped), "dropped": dropped,
                         "added_guards": sum(left.values())}
    out[DICT_TAGS] = {"dropped_guards": 0, "dropped": [],
                      "note": "drops no guard when built: skips a dict's guards while the "
                              "dict's tag is unchanged"}
    out[STANCE] = {"dropped_guards": None, "dropped": [],
                   "note": "after warm-up, checks only the guards that tell the code's cache "
                           "entries apart (none with one entry)"}
    return out


def _summary(dropped: list[tuple[str, str]]) -> dict[str, int]:
    from guardjit.advise_guards import group_of

    c = collections.Counter(group_of(s, 2) for s, _ in dropped)
    return dict(c.most_common(10))


SEED = 0


def fresh(x: Any) -> Any:
    """``x`` with every tensor in it cloned (a forward that writes its input
    in place must not change the next side's input)."""
    return pytree.tree_map(lambda t: t.detach().clone().requires_grad_(t.requires_grad)
                           if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter)
                           else t, x)


def _seeded(side: Any, args: tuple, kwargs: dict) -> tuple[Any, str | None]:
    """:func:`_run` on fresh copies of the inputs and from the same random
    state: a model that draws random numbers (dropout in train mode) draws
    the same ones in eager and on every side with the ``eager`` backend (the
    same ops in the same order), so its outputs are comparable. The caller's
    random state is restored by advise."""
    torch.manual_seed(SEED)
    return _run(side, fresh(args), fresh(kwargs))


def assess(case: BenchCase, warmup: list[tuple], backend: str, limit: int,
           tick: Callable[[str], None]) -> dict[str, Any]:
    from guardjit.bench.capture import capture_units

    exact = backend == "eager"
    args0, kwargs = case.inputs()
    with torch._dynamo.config.patch(recompile_limit=256, accumulated_recompile_limit=4096), \
            torch.random.fork_rng(devices=[]):
        torch._dynamo.reset()
        tick("unsafe options: compile")
        names = ("torch", "guardjit") + FILTERS + (FREE_TENSORS, DICT_TAGS)
        sides = {n: _Side(n, case, backend) for n in names}
        with capture_units() as got:
            for s in sides.values():
                s(args0, kwargs)
        # What each option drops from the units of the example call (later
        # recompiles, on warm-up inputs and changes, record too).
        for s in sides.values():
            s.recorder = s.recorder.snapshot()
        torch_seen = [g for v in sides["torch"].recorder.seen.values() for g in v]
        free_seen = [g for v in sides[FREE_TENSORS].recorder.seen.values() for g in v]
        drops = _drops(sides, torch_seen, free_seen)
        first_cid = next(iter(sides["torch"].recorder.seen), None)
        first_seen = sides["torch"].recorder.seen.get(first_cid, [])
        # A side may raise on a warm-up input (an option serving a graph of
        # another shape): the change "warm-up input i" below shows it.
        for s in sides.values():
            for a in warmup:
                _run(s, a, kwargs)
        # The changes are drawn on the first unit of plain torch (its frame
        # locals and globals).
        first = got[0]
        env = mut.Env(dict(first.f_locals), {"G": _globals_of(first.code), **first.f_locals})
        changes = draw_changes(first_seen, env, warmup, limit)
        rebuilt = collections.Counter()

        def rebuild(name: str) -> _Side:
            rebuilt[name] += 1
            side = _Side(name, case, backend, f"-{rebuilt[name]}")
            for a in [args0] + warmup:
                _run(side, a, kwargs) if name != STANCE else \
                    _run(lambda a, k: side.model(*a, **k), a, kwargs)
            return side

        results = _try(changes, sides, env, case, args0, kwargs, exact, tick, "", rebuild)
        # The stance alone on the code, as a user runs it: its differentiating
        # guards are those of the code's entries, and another side's entry
        # (plain torch's, recompiled on a change with a failing guard) would
        # be one, making the stance raise where it serves a stale graph.
        # Plain torch's answers, which judge each change, are the pass above.
        torch._dynamo.reset()
        tick("unsafe options: the stance")
        stance = _Side(STANCE, case, backend)
        for a in [args0] + warmup:
            # warmed without the stance: the guide's order
            _run(lambda a, k: stance.model(*a, **k), a, kwargs)
        results_st = _try(changes, {STANCE: stance}, env, case, args0, kwargs,
                          exact, tick, "stance: ", rebuild)
        torch._dynamo.reset()
    for r, rs in zip(results, results_st):
        if STANCE in rs["sides"]:
            r["sides"][STANCE] = rs["sides"][STANCE]
        # A change is judged where plain torch agrees with eager on it (both
        # answer the same, or both raise): elsewhere no option can be told
        # stale (a random draw the backend makes differently, a model plain
        # torch itself gets wrong). None: the fuzzer's step did not apply.
        t = r["sides"].get("torch")
        r["judged"] = None if (r["eager_error"] or "").startswith("not applicable") \
            else bool(t and t["same_as_eager"] and t.get("same_after_undo", True))
    options: dict[str, Any] = {}
    for name in OPTIONS + ("guardjit",):
        d = drops.get(name, {"dropped_guards": 0, "dropped": []})
        bites = []
        for r in results:
            o = r["sides"].get(name)
            t = r["sides"].get("torch")
            if o is None or t is None:
                continue
            if not o.get("same_after_undo", True) and t.get("same_after_undo", True) \
                    and (o["same_as_eager"] or not t["same_as_eager"]):
                bites.append({"change": r["change"], "source": r["source"],
                              "shown": "output differs from eager after the change was undone",
                              "dropped_guards_on_source": []})
                continue
            if o["same_as_eager"] or not t["same_as_eager"]:
                continue
            on_source = [f"{readable(s)} ({k})" for s, k in d["dropped"]
                         if r["source"] != "<inputs>" and readable(s).startswith(r["source"])]
            if o["error"]:
                shown = f"raises where eager does not: {o['error'].split('. ')[0][:120]}"
            elif r["eager_error"]:
                shown = f"answers where eager raises {r['eager_error'].split('. ')[0][:120]}"
            else:
                shown = "output differs from eager"
            bites.append({"change": r["change"], "source": r["source"], "shown": shown,
                          "dropped_guards_on_source": on_source[:10]})
        tried = sum(1 for r in results if r["judged"])
        verdict = verdict_of(bites, tried, sum(1 for r in results if r["judged"] is False))
        options[name] = {"dropped_guards": d["dropped_guards"],
                         "dropped_by_group": _summary(d["dropped"]),
                         **({"note": d["note"]} if "note" in d else {}),
                         **({"added_guards": d["added_guards"]} if "added_guards" in d else {}),
                         "safe": not bites, "bites": bites, "verdict": verdict}
    return {"changes": results, "changes_run_in_eager": sum(1 for r in results
                                                             if r["eager_error"] is None),
            "options": options}


def _try(changes: list[Change], sides: dict[str, Any], env: mut.Env, case: BenchCase,
         args0: tuple, kwargs: dict, exact: bool, tick: Callable[[str], None],
         what: str, rebuild: Callable[[str], Any] | None = None) -> list[dict[str, Any]]:
    import logging

    # Dynamo logs each failed recompile of a changed model (the changes
    # are meant to break things): the report says what happened.
    quiet = logging.getLogger("torch")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        return _try_all(changes, sides, env, case, args0, kwargs, exact, tick, what, rebuild)
    finally:
        quiet.setLevel(level)


def _try_all(changes: list[Change], sides: dict[str, Any], env: mut.Env, case: BenchCase,
             args0: tuple, kwargs: dict, exact: bool, tick: Callable[[str], None],
             what: str, rebuild: Callable[[str], Any] | None) -> list[dict[str, Any]]:
    results = []
    for ch in changes:
        tick(f"{what}try {ch.label[:50]}")
        before = buffers(case.model)
        undo = mut.Undo()
        entry: dict[str, Any] = {"change": ch.label, "source": ch.source,
                                 "steps": [st.as_dict() for st in ch.steps],
                                 "eager_error": None, "sides": {}}
        try:
            try:
                for step in ch.steps:
                    undo.label(str(step))
                    mut.apply(step, env, undo)
            except mut.Inapplicable as e:
                entry["eager_error"] = f"not applicable: {e}"
                results.append(entry)
                continue
            args = ch.inputs(args0) if ch.inputs else args0
            # Every call starts from the same buffers: a call in train mode
            # updates BatchNorm's running stats, which would otherwise make
            # the next side differ from eager for no fault of its own.
            start = buffers(case.model)
            want, err = _seeded(lambda a, k: case.model(*a, **k), args, kwargs)
            if err is not None:
                entry["eager_error"] = err
            for name, side in sides.items():
                restore(case.model, start)
                got, serr = _seeded(side, args, kwargs)
                same = (serr is None and err is None and _same(got, want, exact)) or \
                    (serr is not None and err is not None)
                entry["sides"][name] = {"same_as_eager": same, "error": serr}
        finally:
            errors = undo.run()
            if errors:
                raise RuntimeError(f"undoing {ch.label} failed: {errors[0]!r}")
            restore(case.model, before)
        # Changed back: a side that still differs from eager on the example
        # serves the entry compiled while the change was in effect. That
        # is this change's bite; the side is compiled afresh so that the
        # next change starts clean.
        want, err = _seeded(lambda a, k: case.model(*a, **k), args0, kwargs)
        for name, side in list(sides.items()):
            restore(case.model, before)
            got, serr = _seeded(side, args0, kwargs)
            back = err is None and serr is None and _same(got, want, exact)
            if name in entry["sides"]:
                entry["sides"][name]["same_after_undo"] = back
            if not back and rebuild is not None:
                sides[name] = rebuild(name)
        restore(case.model, before)
        results.append(entry)
    return results
