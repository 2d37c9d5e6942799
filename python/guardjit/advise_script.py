"""``python -m guardjit advise -- script.py ARGS``: advise on every ``torch.compile`` of a script.

1. **Observe.** The script runs as ``python script.py ARGS`` would run it
   (``runpy.run_path`` as ``__main__``, ``sys.argv = [script, *ARGS]``, its
   folder first on ``sys.path``) while ``torch.compile`` and
   ``guardjit.compile`` are wrapped (:func:`observe`); ``nn.Module.compile``
   and ``GUARDJIT=1`` go through ``torch.compile``, so they are seen too.
   Each compiled target (the module or function given) is recorded with the
   keyword arguments the script passed to the compile, and every call of
   what the compile returned is counted; the first call's inputs are kept
   as the example, and up to :data:`WARMUPS` further calls with other
   shapes, dtypes or values as warm-up inputs (tensors cloned before the
   call, so in-place changes the script makes later do not reach them).
   The script gets torch's own results back: a module's
   ``OptimizedModule`` (its ``forward``, which pickling drops, records), a
   function's wrapper with the attributes Dynamo reads.
2. **Advise.** After the script, :func:`guardjit.advise.advise` runs on
   each target that was called, the most-called first (``--targets``), with
   advise's own backend and settings; the script's compile arguments are
   reported, not used (the guards advise measures are those of a plain
   compile of the target).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import inspect
import json
import os
import runpy
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree

SCHEMA = "guardjit-advise-script/1"
TARGET_FIELDS = ("target", "kind", "via", "calls", "compiles", "compile_kwargs",
                 "warmup_inputs", "warmups_skipped", "report")
WARMUPS = 3  # distinct further calls kept as warm-up inputs, per target
KEYS = 64  # distinct calls looked at per target, at most (their keys are kept)
TARGETS = 3  # targets advised by default, the most-called first (0: all)


@dataclasses.dataclass(eq=False)  # by identity (fields hold tensors)
class Target:
    """One compiled target of the script and the calls of its compiled form."""

    target: Any  # the module or function given to the compile
    name: str
    kind: str  # "module" or "function"
    via: str  # "torch.compile", "nn.Module.compile" or "guardjit.compile"
    compile_kwargs: dict[str, Any]
    compiles: int = 1
    calls: int = 0
    example: tuple[tuple, dict] | None = None
    warmups: list[tuple] = dataclasses.field(default_factory=list)
    skipped: Counter = dataclasses.field(default_factory=Counter)
    keys: set = dataclasses.field(default_factory=set)


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return getattr(v, "__qualname__", None) or repr(v)


def _clone(tree: Any) -> Any:
    def one(v: Any) -> Any:
        if not isinstance(v, torch.Tensor):
            return v
        c = v.detach().clone()
        return c.requires_grad_() if v.requires_grad and c.is_floating_point() else c
    return pytree.tree_map(one, tree)


def _key(args: tuple, kwargs: dict) -> tuple:
    """What tells calls apart for Dynamo's guards: tensor metadata, other
    leaves by type and value, and the structure."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    out: list[Any] = [str(spec)]
    for v in leaves:
        if isinstance(v, torch.Tensor):
            out.append(("T", tuple(v.shape), str(v.dtype), str(v.device), v.requires_grad))
        elif v is None or isinstance(v, (bool, int, float, complex, str, bytes, torch.dtype,
                                         torch.device)):
            out.append((type(v).__qualname__, repr(v)[:80]))
        else:  # an object: by identity (its repr may be long or print tensors)
            out.append((type(v).__qualname__, id(v)))
    return tuple(out)


def _same_kwargs(a: dict, b: dict) -> bool:
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    if sa != sb:
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x, y):
                return False
        else:
            try:
                if bool(x != y):
                    return False
            except Exception:  # noqa: BLE001 - not comparable: not the same
                return False
    return True


def _normalize(sig: inspect.Signature | None, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Keyword arguments of positional parameters as positional ones: advise
    takes one set of keyword inputs for every call, so warm-up calls can
    only differ in positional inputs."""
    if sig is None or not kwargs:
        return args, kwargs
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return args, kwargs
    return tuple(bound.args), dict(bound.kwargs)


def _signature(fn: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


class Observer:
    """The targets seen while :func:`observe` is active, in order of compile."""

    def __init__(self, warmups: int = WARMUPS) -> None:
        self.targets: list[Target] = []
        self.by_id: dict[int, Target] = {}
        self.warmups = warmups
        self.via: list[str] = []  # set while guardjit.compile runs

    def target_of(self, model: Any, kwargs: dict) -> Target:
        via = self.via[-1] if self.via else "torch.compile"
        obj = model
        if (inspect.ismethod(model) and isinstance(model.__self__, torch.nn.Module)
                and model.__func__ is torch.nn.Module._call_impl):
            obj, via = model.__self__, "nn.Module.compile"  # self._call_impl
        t = self.by_id.get(id(obj))
        if t is not None and t.target is obj:
            t.compiles += 1
            return t
        if isinstance(obj, torch.nn.Module):
            name, kind = type(obj).__name__, "module"
        elif inspect.ismethod(obj):
            name, kind = f"{type(obj.__self__).__name__}.{obj.__name__}", "function"
        else:
            name, kind = getattr(obj, "__qualname__", None) or repr(obj), "function"
        taken = sum(1 for x in self.targets if x.name == name or x.name.startswith(name + " #"))
        if taken:
            name = f"{name} #{taken + 1}"
        t = Target(obj, name, kind, via, {k: _jsonable(v) for k, v in kwargs.items()})
        self.targets.append(t)
        self.by_id[id(obj)] = t
        return t

    def record(self, t: Target, sig: inspect.Signature | None, args: tuple,
               kwargs: dict) -> None:
        t.calls += 1
        if t.example is not None and (len(t.warmups) >= self.warmups or len(t.keys) >= KEYS):
            return
        args, kwargs = _normalize(sig, args, kwargs)
        key = _key(args, kwargs)
        if key in t.keys:
            return
        if t.example is None:
            t.example = _clone((tuple(args), dict(kwargs)))
        elif not _same_kwargs(kwargs, t.example[1]):
            t.skipped["keyword inputs differ from the first call's"] += 1
        else:
            t.warmups.append(_clone(tuple(args)))
        t.keys.add(key)  # kept (a call whose inputs could not be kept is tried again)

    def recording(self, t: Target, fn: Any, sig: inspect.Signature | None) -> Any:
        """``fn`` (what the compile returned, or its forward), counting and
        keeping the inputs of its calls."""

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            if not torch.compiler.is_compiling():
                try:
                    self.record(t, sig, args, kwargs)
                except Exception as e:  # noqa: BLE001 - the script's call runs regardless
                    t.skipped[f"inputs not kept: {type(e).__name__}: {e}"[:200]] += 1
            return fn(*args, **kwargs)

        run._guardjit_advise_recording = True  # type: ignore[attr-defined]
        return run

    def watch(self, model: Any, compiled: Any, kwargs: dict) -> Any:
        """Records ``compiled`` (torch.compile's result for ``model``);
        returns what the script gets back."""
        if compiled is model or not callable(compiled):
            return compiled  # disable=True: the model itself runs
        t = self.target_of(model, kwargs)
        from torch._dynamo.eval_frame import OptimizedModule

        if isinstance(compiled, OptimizedModule):
            self.watch_module(t, compiled)
            return compiled
        fwd = t.target.forward if isinstance(t.target, torch.nn.Module) else t.target
        return self.recording(t, compiled, _signature(fwd))

    def watch_module(self, t: Target, compiled: Any) -> None:
        # An instance attribute that pickling and deep copies drop
        # (OptimizedModule.__getstate__/__reduce__): torch's object stays.
        if not getattr(compiled.forward, "_guardjit_advise_recording", False):
            compiled.forward = self.recording(t, compiled.forward,
                                              _signature(compiled._orig_mod.forward))


@contextlib.contextmanager
def observe(warmups: int = WARMUPS) -> Iterator[Observer]:
    """Wraps ``torch.compile`` and ``guardjit.compile`` while active."""
    import guardjit

    obs = Observer(warmups)
    torch_compile, gj_compile = torch.compile, guardjit.compile
    defaults = {k: p.default for k, p in inspect.signature(torch_compile).parameters.items()
                if p.default is not inspect.Parameter.empty}

    @functools.wraps(torch_compile)
    def compile_(model: Any = None, *args: Any, **kwargs: Any) -> Any:
        # torch.compile pops from the options dict it is given (guard_filter_fn):
        # record what the script passed.
        kwargs_given = {k: dict(v) if isinstance(v, dict) else v for k, v in kwargs.items()}
        compiled = torch_compile(model, *args, **kwargs)
        if model is None:
            return compiled  # the decorator form comes back here with the model
        # torch's decorator form passes every argument: keep the ones set.
        given = {k: v for k, v in kwargs_given.items()
                 if k not in defaults or defaults[k] is not v and defaults[k] != v}
        return obs.watch(model, compiled, given)

    @functools.wraps(gj_compile)
    def gj_compile_(model: Any = None, **kwargs: Any) -> Any:
        if model is None:
            return functools.partial(gj_compile_, **kwargs)
        obs.via.append("guardjit.compile")
        try:
            compiled = gj_compile(model, **kwargs)
        finally:
            obs.via.pop()
        t = obs.by_id.get(id(model))
        from torch._dynamo.eval_frame import OptimizedModule

        if t is not None and isinstance(compiled, OptimizedModule):
            obs.watch_module(t, compiled)  # guardjit's mark set a new forward
        return compiled

    torch.compile, guardjit.compile = compile_, gj_compile_
    try:
        yield obs
    finally:
        torch.compile, guardjit.compile = torch_compile, gj_compile


class ScriptError(Exception):
    """The script raised or exited with a non-zero code."""


def run_script(script: str, argv: list[str], warmups: int = WARMUPS) -> list[Target]:
    """Runs ``script`` as ``python script *argv`` would, observing every
    compile. Raises :class:`ScriptError` (after printing the traceback)
    when the script raises or exits with a non-zero code."""
    path = os.path.abspath(script)
    saved_argv, saved_path, saved_cwd = sys.argv, list(sys.path), os.getcwd()
    sys.argv = [script, *argv]
    sys.path[0:1] = [os.path.dirname(os.path.realpath(path))]
    try:
        with observe(warmups) as obs:
            try:
                runpy.run_path(path, run_name="__main__")
            except SystemExit as e:
                if e.code not in (None, 0):
                    raise ScriptError(f"{script} exited with code {e.code}") from None
            except Exception as e:
                traceback.print_exc()
                raise ScriptError(f"{script} raised {type(e).__name__}: {e}") from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        sys.stdout.flush()
    return obs.targets


def _unset_compiled_call(t: Target) -> contextlib.AbstractContextManager:
    """nn.Module.compile makes the module's own calls compiled; advise needs
    its eager calls eager."""
    m = t.target
    if t.via != "nn.Module.compile" or getattr(m, "_compiled_call_impl", None) is None:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def unset() -> Iterator[None]:
        saved = m._compiled_call_impl
        m._compiled_call_impl = None
        try:
            yield
        finally:
            m._compiled_call_impl = saved
    return unset()


def advise_targets(targets: list[Target], limit: int, backend: str, settings: Any,
                   progress: bool, out: Any = sys.stdout) -> tuple[list[dict[str, Any]], int]:
    """Runs advise on the ``limit`` most-called targets (0: all); returns the
    JSON entries of every target and how many advise runs failed."""
    from guardjit import advise as advise_mod

    ranked = sorted(targets, key=lambda t: -t.calls)  # stable: compile order among equals
    called = [t for t in ranked if t.calls]
    chosen = called if limit <= 0 else called[:limit]
    entries, failed = [], 0
    for t in ranked:
        entry: dict[str, Any] = {"target": t.name, "kind": t.kind, "via": t.via,
                                 "calls": t.calls, "compiles": t.compiles,
                                 "compile_kwargs": t.compile_kwargs,
                                 "warmup_inputs": len(t.warmups),
                                 "warmups_skipped": dict(t.skipped), "report": None}
        entries.append(entry)
        if t not in chosen:
            entry["skipped"] = ("never called" if not t.calls
                                else f"beyond --targets {limit} (the most-called first)")
            continue
        kw = ", ".join(f"{k}={v!r}" for k, v in t.compile_kwargs.items()) or "none"
        print(f"\n=== target {chosen.index(t) + 1}/{len(chosen)}: {t.name} ({t.kind}, {t.via}; "
              f"{t.calls} calls, {len(t.warmups)} warm-up inputs; the script's compile "
              f"arguments: {kw}; measured with backend {backend})", file=out)
        args, kwargs = t.example
        try:
            with _unset_compiled_call(t):
                report = advise_mod.advise(t.target, args, t.warmups, example_kwargs=kwargs,
                                           name=t.name, backend=backend, settings=settings,
                                           progress=progress)
        except Exception as e:  # noqa: BLE001 - reported; the other targets still run
            failed += 1
            entry["error"] = f"{type(e).__name__}: {e}"
            print(f"python -m guardjit advise: error: advise on {t.name} failed: "
                  f"{entry['error']}", file=sys.stderr)
            continue
        entry["report"] = report
        print(advise_mod.format_report(report), file=out)
        tried = [c["change"] for c in report["unsafe"]["changes"]]
        what = ("changes tried (a function: no module of its own; the globals it reads, "
                "grad mode, the warm-up inputs)" if t.kind == "function" else "changes tried")
        print(f"  {what}: {', '.join(tried) if tried else 'none'}", file=out)
    return entries, failed


def _per_target(path: str | None, name: str, many: bool) -> str | None:
    """``--html``/``--plot`` for one target: the path given, or with several
    targets advised ``stem-<target>.ext``."""
    if not path or not many:
        return path
    import re

    stem, ext = os.path.splitext(path)
    return f"{stem}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', name).strip('_')}{ext}"


def main(args: Any, render: Callable[[dict[str, Any], Any], int] | None = None) -> int:
    """``python -m guardjit advise -- script.py ARGS``; ``render(report,
    paths)`` writes ``paths.html``/``paths.plot`` of each advised target
    (``advise_report.render``)."""
    script, argv = args.script[0], list(args.script[1:])
    err = "python -m guardjit advise: error:"
    if not os.path.isfile(script):
        print(f"{err} no such script: {script}", file=sys.stderr)
        return 2
    # Absolute now: the script may change the working directory.
    json_path = args.json if args.json in (None, "-") else os.path.abspath(args.json)
    html, plot = (os.path.abspath(p) if p else None
                  for p in (getattr(args, "html", None), getattr(args, "plot", None)))
    try:
        targets = run_script(script, argv)
    except ScriptError as e:
        print(f"{err} {e}; nothing to advise on", file=sys.stderr)
        return 1
    if not targets:
        print(f"{err} {script} compiled nothing (no torch.compile, nn.Module.compile or "
              "guardjit.compile ran)", file=sys.stderr)
        return 2
    if not any(t.calls for t in targets):
        print(f"{err} {script} compiled {', '.join(t.name for t in targets)} but never "
              "called the result: no inputs to advise on", file=sys.stderr)
        return 2
    from guardjit import plugin
    from guardjit.advise import Settings

    installed = plugin.config.route_all  # GUARDJIT=1, or guardjit.install() in the script
    limit = TARGETS if getattr(args, "targets", None) is None else args.targets
    # With --json -, stdout ends with the JSON (the script's own output before it).
    table = sys.stderr if json_path == "-" else sys.stdout
    entries, failed = advise_targets(targets, limit, args.backend, Settings.from_args(args),
                                     not args.no_progress, out=table)
    for e in entries:
        if e.get("skipped"):
            print(f"not advised: {e['target']} (calls: {e['calls']}): {e['skipped']}",
                  file=table)
    rendered = 0
    reports = [e for e in entries if e["report"] is not None]
    if render is not None and (html or plot):
        for e in reports:
            paths = argparse.Namespace(html=_per_target(html, e["target"], len(reports) > 1),
                                       plot=_per_target(plot, e["target"], len(reports) > 1))
            rendered = max(rendered, render(e["report"], paths))
    if json_path:
        text = json.dumps({"schema": SCHEMA, "script": os.path.abspath(script), "argv": argv,
                           "guardjit_installed": installed, "targets": entries},
                          indent=1, default=str)
        if json_path == "-":
            print(text)
        else:
            with open(json_path, "w") as f:
                f.write(text + "\n")
    return 1 if failed else rendered
