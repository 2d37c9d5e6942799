"""``python -m guardjit fuzz``: runs N cases over the targets, prints counts.

The plan (:func:`plan`): every corpus model (quick sizes) under every option
of :data:`targets.OPTIONS`, generated programs (each under an option drawn
from the seed) and stance targets (generated programs under each
differentiating-set policy). The check-level targets share ``1 - stance``
of the cases equally; the stance targets the rest. Each target is compiled
once and serves all its cases (every case's mutations are undone); case ``i``
of target ``K`` draws from ``random.Random(f"{seed}:{K}:{i}")``, so a run is
reproducible from its seed. Every ``e2e_every``-th eligible case also runs end
to end (:mod:`guardjit.fuzz.e2e`). Every disagreement is minimized and saved
under ``out_dir`` (:mod:`guardjit.fuzz.reproducer`).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import random
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch

from guardjit import _core, plugin
from guardjit.fuzz import (e2e, isolate, leaks, mutations, oracle, reproducer, stance_oracle, swaps,
                           targets)


@dataclasses.dataclass
class Summary:
    seed: int
    cases: int = 0
    wall_s: float = 0.0
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    ops: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    reproducers: list[str] = dataclasses.field(default_factory=list)
    disagreements: list[str] = dataclasses.field(default_factory=list)
    # Differences from eager that are plain torch's behaviour (not counted as
    # disagreements), with what showed it.
    torch_behaviour: list[str] = dataclasses.field(default_factory=list)
    # In-process mismatches that fresh processes do not reproduce (isolate.py).
    unreproduced: list[str] = dataclasses.field(default_factory=list)
    # Cases that broke the fuzzer's own calls in every process: no verdict.
    unjudged: list[str] = dataclasses.field(default_factory=list)
    build_errors: list[str] = dataclasses.field(default_factory=list)
    # The fuzzer's own process state broke (counts["harness_errors"]): a
    # target that compiled nothing, a stance probe with no entry at all.
    # Results after one are not about guardjit; the run fails.
    harness_errors: list[str] = dataclasses.field(default_factory=list)
    # The undo actions that raised, with their case (counts["undo_errors"]).
    undo_errors: list[str] = dataclasses.field(default_factory=list)
    targets: int = 0
    # plugin.subtree_skip_source() when the run started, and why units of
    # the run's compiles got no skip plan (stats()["subtree_skip"]).
    skip_source: str = ""
    skip_declined: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    tier_swaps: bool = False

    @property
    def total_disagreements(self) -> int:
        return (self.counts["check_disagree"] + self.counts["stance_misroute"]
                + self.counts["e2e_mismatch"] + self.counts["swap_distrusted"])

    def text(self) -> str:
        c = self.counts
        rate = self.cases / self.wall_s if self.wall_s else 0.0
        lines = [
            f"guardjit fuzz: seed {self.seed}, {self.cases} cases over {self.targets} targets "
            f"in {self.wall_s:.1f} s ({rate:.0f} cases/s)",
            f"  check level: {c['check']} cases ({c['steps']} steps applied, "
            f"{c['skipped_steps']} did not fit), {c['unit_checks']} unit checks: Dynamo "
            f"passed {c['dynamo_pass']}, rejected {c['dynamo_fail']}, raised {c['dynamo_raise']}; "
            f"units on Dynamo's path {c['units_dynamo_path']}; passed only by torch's "
            f"dict-tag fast path (guardjit and Dynamo's whole tree fail) "
            f"{c['check_dict_tag_stale']}",
            f"  end to end: {c['e2e']} runs ({c['e2e_both_raise']} raised in eager and "
            f"compiled; {c['e2e_torch_same']} differ from eager exactly as plain torch.compile "
            f"does, {c['e2e_torch_fresh']} more in fresh processes, {c['e2e_unsafe_filter']} "
            f"under an unsafe filter; {c['e2e_unreproduced']} not reproduced in fresh "
            f"processes, {c['e2e_unjudged']} not judged: the case broke the fuzzer's own "
            f"calls)",
            f"  subtree skipping ({self.skip_source}): {c['skip_units']} units with a plan, "
            f"{c['skip_units_declined']} declined; "
            f"of their checks on a case's state, {c['skip_hit']} answered by validation + "
            f"residual ({c['skip_hit_rejected']} of them rejections), {c['skip_fallback']} "
            f"fell back to the full check (a recorded dict, type or pointer changed), "
            f"{c['skip_full']} full (no snapshot); snapshots {c['skip_records']}, record "
            f"failures {c['skip_record_failures']}, units that stopped skipping "
            f"{c['skip_units_disabled']}",
            f"  subtree skipping declined, over every compile of the run: "
            + (", ".join(f"{n} x {r}" for r, n in sorted(self.skip_declined.items(),
                                                           key=lambda x: -x[1])) or "none"),
            f"  stance: {c['stance']} probes ({c['stance_calls']} judged calls)",
        ]
        if self.tier_swaps:
            lines.append(
                f"  tier swaps: {c['swap_callables']} fresh callables (interpreter -> "
                f"{swaps.FIRST} -> {swaps.THEN}); calls at interpreter "
                f"{c['swap_calls_interpreter']}, {swaps.FIRST} {c['swap_calls_' + swaps.FIRST]}, "
                f"{swaps.THEN} {c['swap_calls_' + swaps.THEN]}; swaps observed between two "
                f"calls {c['swaps_observed']}; new code distrusted {c['swap_distrusted']}")
        lines += [
            f"  disagreements: check {c['check_disagree']}, end to end {c['e2e_mismatch']}, "
            f"stance misroutes {c['stance_misroute']}; undo errors {c['undo_errors']}, "
            f"state leaks {c['leaks']}; harness errors {c['harness_errors']}",
        ]
        if self.harness_errors:
            lines.append(f"  HARNESS ERRORS: {len(self.harness_errors)}: the fuzzer's own "
                         f"process state broke; the run is not valid: "
                         + "; ".join(self.harness_errors[:5]))
        for d in self.undo_errors[:5]:
            lines.append(f"  undo error: {d}")
        if self.build_errors:
            lines.append(f"  targets that did not build: {len(self.build_errors)}: "
                         + "; ".join(self.build_errors[:5]))
        for d in self.disagreements[:20]:
            lines.append(f"  ! {d}")
        for d in self.torch_behaviour[:10]:
            lines.append(f"  torch's behaviour: {d}")
        for d in self.unreproduced[:10]:
            lines.append(f"  not reproduced in fresh processes: {d}")
        for d in self.unjudged[:10]:
            lines.append(f"  not judged (the case breaks the fuzzer's own calls): {d}")
        for p in self.reproducers[:20]:
            lines.append(f"  reproducer: {p}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"seed": self.seed, "cases": self.cases, "wall_s": self.wall_s,
                "targets": self.targets, "counts": dict(self.counts), "ops": dict(self.ops),
                "reproducers": self.reproducers, "disagreements": self.disagreements,
                "torch_behaviour": self.torch_behaviour,
                "unreproduced": self.unreproduced,
                "unjudged": self.unjudged,
                "build_errors": self.build_errors,
                "harness_errors": self.harness_errors,
                "undo_errors": self.undo_errors,
                "subtree_skip": self.skip_dict()}

    def skip_dict(self) -> dict:
        """Subtree skipping over the check level (oracle.UnitAnswers.skip):
        units with a plan; checks of those units on a case's state answered
        by validation + residual (hits; rejections among them), that fell back
        to the full check, or ran it without a snapshot; snapshots recorded,
        record failures and units that stopped skipping (skip_stats)."""
        c = self.counts
        return {"source": self.skip_source, "units": c["skip_units"],
                "units_declined": c["skip_units_declined"],
                "declined_reasons": dict(self.skip_declined),
                "hits": c["skip_hit"], "hits_rejected": c["skip_hit_rejected"],
                "fallbacks": c["skip_fallback"], "full": c["skip_full"],
                "records": c["skip_records"], "record_failures": c["skip_record_failures"],
                "units_disabled": c["skip_units_disabled"]}


def plan(models: list[str], options: list[str], programs: int, stance_programs: int,
         seed: int) -> tuple[list[targets.TargetSpec], list[tuple[str, str, str]]]:
    check = [targets.TargetSpec("corpus", m, o) for m in models for o in options]
    rng = random.Random(f"plan:{seed}")
    for i in range(programs):
        check.append(targets.TargetSpec("program", str(seed * 1000 + i), rng.choice(options)))
    stance = [("program", str(seed * 1000 + 500 + i), p)
              for i in range(stance_programs) for p in stance_oracle.POLICIES]
    return check, stance


class _Bar:
    def __init__(self, total: int, enabled: bool) -> None:
        self.bar, self.n, self.total, self.enabled = None, 0, total, enabled
        self.start = time.perf_counter()
        self.last = 0.0
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, file=sys.stderr, unit="case", dynamic_ncols=True,
                                smoothing=0.05)
            except ImportError:
                pass

    def update(self, n: int, desc: str, summary: Summary) -> None:
        self.n += n
        if not self.enabled:
            return
        c = summary.counts
        post = f"dis={summary.total_disagreements} rej={c['dynamo_fail']} pass={c['dynamo_pass']}"
        if self.bar is not None:
            self.bar.update(n)
            self.bar.set_description_str(desc[:40], refresh=False)
            self.bar.set_postfix_str(post, refresh=False)
        elif time.perf_counter() - self.last > 2.0 or self.n == self.total:
            self.last = time.perf_counter()
            print(f"\r[{self.n}/{self.total} {self.last - self.start:5.0f}s] {desc[:40]} {post}",
                  end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            print(file=sys.stderr)


def _split(n: int, k: int) -> list[int]:
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def run(cases: int, seed: int = 0, models: list[str] | None = None,
        options: list[str] | None = None, programs: int = 20, stance_programs: int = 3,
        stance_share: float = 0.03, e2e_every: int = 97, out_dir: str = "fuzz-reproducers",
        progress: bool = True, time_limit_s: float | None = None,
        override: oracle.CheckerOverride | None = None, minimize: bool = True,
        tier_swaps: bool = False, swap_batch: int = 8) -> Summary:
    models = list(targets.CORPUS_MODELS) if models is None else models
    options = list(targets.OPTIONS) if options is None else options
    check_specs, stance_specs = plan(models, options, programs, stance_programs, seed)
    n_stance = int(cases * stance_share) if stance_specs else 0
    n_check = cases - n_stance
    summary = Summary(seed)
    summary.tier_swaps = tier_swaps
    summary.targets = len(check_specs) + len(stance_specs)
    summary.skip_source = plugin.subtree_skip_source()
    declined_before = collections.Counter(plugin.stats()["subtree_skip"]["declined_reasons"])
    bar = _Bar(cases, progress)
    start = time.perf_counter()
    deadline = None if time_limit_s is None else start + time_limit_s
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    # Every unit that can have a skip plan gets one: the fuzzer tests that
    # plans are sound, not only the plans the cost model finds worth it.
    cost_model = plugin.config.subtree_skip_cost_model
    plugin.config.subtree_skip_cost_model = False
    # The end-to-end sample compiles invalid programs too (Dynamo logs them).
    quiet = [logging.getLogger(n) for n in ("torch._dynamo", "torch._subclasses.fake_tensor")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for spec, n in zip(check_specs, _split(n_check, max(len(check_specs), 1))):
                if n and (deadline is None or time.perf_counter() < deadline):
                    _run_check_target(spec, n, seed, summary, bar, out_dir, e2e_every, override,
                                      minimize, deadline, swap_batch if tier_swaps else 0)
            for spec, n in zip(stance_specs, _split(n_stance, max(len(stance_specs), 1))):
                if n and (deadline is None or time.perf_counter() < deadline):
                    _run_stance_target(spec, n, seed, summary, bar, out_dir, deadline)
    finally:
        plugin.config.subtree_skip_cost_model = cost_model
        torch.set_num_threads(threads)
        for q, lv in zip(quiet, levels):
            q.setLevel(lv)
        bar.close()
    summary.wall_s = time.perf_counter() - start
    summary.skip_declined = (collections.Counter(plugin.stats()["subtree_skip"]["declined_reasons"])
                             - declined_before)
    return summary


def _harness_error(summary: Summary, what: str) -> None:
    summary.counts["harness_errors"] += 1
    if len(summary.harness_errors) < 50:
        summary.harness_errors.append(what)


def _build_error(summary: Summary, key: str, e: BaseException) -> None:
    summary.build_errors.append(f"{key}: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
                                if str(e) else f"{key}: {type(e).__name__}")


def _run_check_target(spec: targets.TargetSpec, n: int, seed: int, summary: Summary, bar: _Bar,
                      out_dir: str, e2e_every: int, override: Any, minimize: bool,
                      deadline: float | None, swap_batch: int = 0) -> None:
    """``swap_batch`` > 0: cases also run across tier swaps (swaps.py), a
    fresh swapping callable per unit every ``swap_batch`` cases."""
    try:
        target = spec.build()
    except Exception as e:  # noqa: BLE001 - reported, the run goes on
        _build_error(summary, spec.key, e)
        bar.update(n, spec.key, summary)
        return
    c = summary.counts
    tier = None
    try:
        if not target.units:
            # Every corpus model and generated program compiles at least one
            # unit: nothing compiled means the process state is broken.
            _harness_error(summary, f"{spec.key}: torch.compile produced no compile unit")
            bar.update(n, spec.key, summary)
            return
        c["units_dynamo_path"] += sum(u.status == "dynamo" for u in target.units)
        planned = sum(u.skip_stats() is not None for u in target.units)
        c["skip_units"] += planned
        if summary.skip_source != "off":
            c["skip_units_declined"] += sum(u.status != "dynamo" for u in target.units) - planned
        eligible = 0
        done = 0
        history: list[dict] = []  # the end-to-end samples run on this target, in order
        tier = swaps.TierSwaps(target, swap_batch) if swap_batch else None
        case_override = tier.override(override) if tier is not None else override
        for i in range(n):
            if deadline is not None and i % 64 == 0 and time.perf_counter() > deadline:
                break
            rng = random.Random(f"{seed}:{spec.key}:{i}")
            case = mutations.random_case(rng, target.units)
            if tier is not None:
                tier.before_case(i)
            verdict = oracle.run_case(target, case, case_override)
            done += 1
            summary.cases += 1
            c["check"] += 1
            c["steps"] += verdict.applied
            c["skipped_steps"] += len(verdict.skipped)
            c["undo_errors"] += len(verdict.undo_errors)
            if verdict.undo_errors and len(summary.undo_errors) < 50:
                summary.undo_errors.append(f"{spec.key}: case {i} "
                                           f"{[str(s) for s in case.steps]}: "
                                           + "; ".join(verdict.undo_errors)[:400])
            for s in case.steps:
                summary.ops[s.op] += 1
            for ua in verdict.units:
                c["unit_checks"] += 1
                exp = ua.expected
                c["dynamo_pass" if exp is True else "dynamo_fail" if exp is False
                  else "dynamo_raise"] += 1
                if ua.skip is not None:
                    c[f"skip_{ua.skip}"] += 1
                    c["skip_hit_rejected"] += ua.skip == "hit" and exp is False
            if verdict.only_stale_tag_passes:
                # torch's dict-tag fast path passed what its whole tree fails;
                # guardjit fails it (a recompile): torch's behaviour.
                c["check_dict_tag_stale"] += 1
                if len(summary.torch_behaviour) < 50:
                    summary.torch_behaviour.append(
                        f"{spec.key}: Dynamo's dict-tag fast path passes what its whole tree "
                        f"and guardjit fail, after {[str(s) for s in case.steps]}")
            elif verdict.disagrees:
                c["check_disagree"] += 1
                _save_check(target, case, verdict, summary, out_dir, case_override, minimize)
            ran_e2e = False
            if e2e_every and e2e.eligible(target, case):
                eligible += 1
                if eligible % e2e_every == 1 or e2e_every == 1:
                    _e2e(target, case, summary, out_dir, history)
                    ran_e2e = True
            # After every case (one Dynamo check per unit; the oracle runs four): a
            # mutation that was not undone would make every later case test
            # another state than it says.
            leaked = oracle.base_ok(target)
            if leaked:
                c["leaks"] += 1
                try:
                    leak: Any = leaks.find_step(spec.key, target.program_source, case.as_dict(),
                                                ran_e2e)
                except Exception as e:  # noqa: BLE001 - the leak may have broken this process
                    leak = f"the leak replay failed here: {e!r}"
                summary.disagreements.append(
                    f"{spec.key}: state not restored after case {i} "
                    f"({[str(s) for s in case.steps]}"
                    f"{', and its end-to-end sample' if ran_e2e else ''}): units "
                    f"{', '.join(leaked)} fail on their compile-time frame locals; {leak}"
                    + (f"; undo errors in the case: {'; '.join(verdict.undo_errors)[:300]}"
                       if verdict.undo_errors else ""))
                break
            if i % 32 == 31:
                bar.update(32, spec.key, summary)
        bar.update(n - (done // 32) * 32, spec.key, summary)
    finally:
        if tier is not None:
            _core.wait_tier_up(60)  # this target's swaps land before it is closed
            c.update(tier.counts)
            distrusted = tier.distrusted()
            if distrusted:
                c["swap_distrusted"] += distrusted
                summary.disagreements.append(
                    f"{spec.key}: {distrusted} new native code(s) disagreed with the "
                    f"interpreter on their first call (tier_up_stats distrusted)")
        for u in target.units:
            st = u.skip_stats()
            if st is not None:
                c["skip_records"] += st["records"]
                c["skip_record_failures"] += st["record_failures"]
                c["skip_units_disabled"] += st["disabled"]
        target.close()


def _save_check(target: targets.Target, case: mutations.Case, verdict: oracle.Verdict,
                summary: Summary, out_dir: str, override: Any, minimize: bool) -> None:
    key = target.spec.key
    if minimize:
        case = reproducer.minimize(case, lambda c: oracle.run_case(target, c, override).disagrees)
        verdict = oracle.run_case(target, case, override)
    guards = oracle.differing_guards(target, case, verdict)
    summary.disagreements.append(f"{key}: {[str(s) for s in case.steps]}: {verdict.summary()}")
    if out_dir and len(summary.reproducers) < 200:
        data = reproducer.check_data(key, case, verdict, target.program_source)
        summary.reproducers.append(reproducer.write(
            out_dir, "check", key, data, verdict.summary(), [str(s) for s in case.steps], guards))


def _e2e(target: targets.Target, case: mutations.Case, summary: Summary, out_dir: str,
         history: list[dict]) -> None:
    c = summary.counts
    history.append(case.as_dict())
    try:
        r = e2e.run(target, case)
    except Exception as e:  # noqa: BLE001 - e.g. Dynamo internal errors: reported
        r = e2e.Result(False, "?", f"driver error {type(e).__name__}: {e}"[:200])
    if r is None:
        history.pop()
        return
    c["e2e"] += 1
    c["e2e_both_raise"] += r.eager.startswith("raise") and r.ok
    steps = [str(s) for s in case.steps]
    if not r.ok and r.torch == "same" and target.spec.option in targets.FILTERS:
        # An unsafe filter may serve another state's graph: plain torch with
        # the same filter served the same one.
        c["e2e_unsafe_filter"] += 1
    elif not r.ok and r.torch == "same":
        c["e2e_torch_same"] += 1  # plain torch.compile does the same: not guardjit's
    elif not r.ok:
        # Both sides share the code objects below the entry frame in this
        # process: only fresh processes, one side each, tell torch's
        # behaviour from guardjit's (isolate.py).
        iso = isolate.classify(target.spec.key, target.program_source, list(history))
        if iso.torch_behaviour:
            c["e2e_torch_fresh"] += 1
            summary.torch_behaviour.append(
                f"{target.spec.key}: end to end {r!r} after {steps} "
                f"(e2e sample {len(history)} of the target); {iso!r}")
            return
        if r.compiled.startswith("driver error") and iso.harness_broken:
            # The case broke the fuzzer's own code (it deleted torch.nn or a
            # keyword default of inspect.signature) in every process: no
            # result of either side could be judged.
            c["e2e_unjudged"] += 1
            summary.unjudged.append(f"{target.spec.key}: {r!r} after {steps}; {iso!r}")
            return
        if iso.unreproduced:
            c["e2e_unreproduced"] += 1
            summary.unreproduced.append(
                f"{target.spec.key}: end to end {r!r} after {steps} "
                f"(e2e sample {len(history)} of the target); {iso!r}")
            return
        c["e2e_mismatch"] += 1
        summary.disagreements.append(f"{target.spec.key}: end to end {r!r} after {steps}; "
                                     f"{iso!r}")
        if out_dir:
            data = {"kind": "e2e", "target": target.spec.key, "case": case.as_dict(),
                    "history": list(history), "program_source": target.program_source,
                    "result": repr(r), "isolated": repr(iso)}
            summary.reproducers.append(reproducer.write(
                out_dir, "e2e", target.spec.key, data, f"{r!r}; {iso!r}", steps, []))


def _run_stance_target(spec: tuple[str, str, str], n: int, seed: int, summary: Summary,
                       bar: _Bar, out_dir: str, deadline: float | None) -> None:
    kind, name, policy = spec
    key = f"{kind}:{name}:{policy}"
    try:
        target = stance_oracle.build(kind, name, policy, seed)
    except Exception as e:  # noqa: BLE001
        _build_error(summary, "stance " + key, e)
        bar.update(n, key, summary)
        return
    c = summary.counts
    try:
        for i in range(n):
            if deadline is not None and time.perf_counter() > deadline:
                break
            rng = random.Random(f"{seed}:stance:{key}:{i}")
            order, probe = stance_oracle.draw(rng, target)
            v = stance_oracle.run_case(target, order, probe)
            summary.cases += 1
            c["stance"] += 1
            c["stance_calls"] += len(v.calls)
            if v.nothing_compiled:
                _harness_error(summary, f"stance {key}: no entry compiled at all "
                                        f"(cache empty, nothing served)")
            elif v.disagrees:
                c["stance_misroute"] += 1
                summary.disagreements.append(f"stance {key} ({target.variants}): {v.summary()}")
                if out_dir:
                    data = {"kind": "stance", "target": key, "seed": seed, "order": order,
                            "probe": probe, "variants": target.variants}
                    summary.reproducers.append(reproducer.write(
                        out_dir, "stance", key, data, v.summary(),
                        [f"cache order {[target.variants[j] for j in order]}, probe "
                         f"{target.variants[probe]}"], []))
            bar.update(1, "stance " + key, summary)
    finally:
        target.close()


def main(args: Any) -> int:
    """The CLI entry (``python -m guardjit fuzz``)."""
    if args.replay:
        return reproducer.replay_file(args.replay)
    try:
        summary = run(args.cases, args.seed, models=args.models, options=args.options,
                      programs=args.programs, stance_programs=args.stance_programs,
                      stance_share=args.stance_share, e2e_every=args.e2e_every,
                      out_dir=args.out, progress=not args.no_progress,
                      time_limit_s=args.time_limit, tier_swaps=args.tier_swaps,
                      swap_batch=args.swap_batch)
    except Exception:
        traceback.print_exc()
        return 2
    print(summary.text())
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(summary.as_dict(), f, indent=1)
        print(f"wrote {args.json}", file=sys.stderr)
    if summary.counts["harness_errors"]:
        print(f"guardjit fuzz: FAILED: {summary.counts['harness_errors']} harness error(s): "
              f"the fuzzer's own process state broke (see HARNESS ERRORS above)",
              file=sys.stderr)
        return 2
    return 1 if summary.total_disagreements or summary.counts["leaks"] else 0
