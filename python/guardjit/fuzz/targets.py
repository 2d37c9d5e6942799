"""What the fuzzer mutates: a compiled corpus model or generated program,
under one of the plugin's options, with every compile unit's checkers.

A :class:`TargetSpec` names a target (``corpus:mlp:dict_tags``,
``program:17:multi_entry``) and builds it: ``guardjit.compile`` with
``backend="eager"``, one call (more for ``multi_entry``), and per compile unit
(:class:`CheckUnit`) the four things the oracle compares, all taken the way
``tests/python/test_agreement.py`` takes them:

* ``dynamo``: Dynamo's own ``RootGuardManager`` (the tree guardjit replaced);
* ``interpreter``: guardjit's reference interpreter (``bound.interpret``);
* ``native``: the JIT-compiled check callable (``_core.make_guard``) after
  the default pipeline;
* ``root``: the root the cache entry runs (guardjit's, with that callable).

``native`` and ``root`` run the same check object, which carries the unit's
subtree skipping when it has a plan (docs/subtree-skipping.md):
:meth:`CheckUnit.skip_stats` reads its counters.

plus the compile-time frame locals, the globals scope of the frame (for
``G[...]`` sources) and the sources of Dynamo's tree (what the mutations
address). Options: ``default``, each of torch's six ``guard_filter_fn``
filters, ``install_free_tensors``, ``dict_tags``
(``use_recursive_dict_tags_for_guards``) and ``multi_entry`` (several cache
entries for the code object: the model is called with a second and third
input that recompile: dtype, then a size, which makes it dynamic).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo.guards as dynamo_guards

import guardjit
from guardjit import _core, plugin
from guardjit.bench.options import FILTERS  # torch's six guard_filter_fn helpers

OPTIONS = ("default",) + FILTERS + ("install_free_tensors", "dict_tags", "multi_entry")
# Corpus models small enough for many fuzz cases (quick sizes: qwen3-36L has 2
# layers there); all eleven by default.
CORPUS_MODELS = ("mlp", "resnet-cnn", "decoder", "deep-decoder", "param-heavy", "gpt2", "bert",
                 "llama", "mistral", "t5", "qwen3-36L")


@dataclasses.dataclass
class CheckUnit:
    name: str
    status: str  # native | interpreter | dynamo (left on Dynamo's path)
    dynamo_root: Any
    root: Any  # the installed root
    interpret: Callable[[dict], Any] | None
    native: Callable[[dict], Any] | None
    f_locals: dict
    scope: dict  # G, __builtins__ ... (Dynamo's GuardBuilder.scope without L)
    code: Any
    sources: list[str]
    tensor_sources: list[str]
    ir_text: str = ""
    ir: Any = None  # guardjit's checked GuardSet (after the pipeline)

    def checkers(self) -> dict[str, Callable[[dict], Any]]:
        out: dict[str, Callable[[dict], Any]] = {"dynamo": self.dynamo_root.check}
        if self.status != "dynamo":
            out["interpreter"] = self.interpret
            if self.native is not None:
                out["native"] = self.native
            out["root"] = self.root.check
        return out

    def skip_stats(self) -> dict | None:
        """The counters of the subtree skipping of the check the installed
        root runs (``_core.skip_stats``: hits, fallbacks, records...), None
        when the unit has no skip plan (declined, skipping off, or on
        Dynamo's path)."""
        if self.status == "dynamo" or self.native is None:
            return None
        return _core.skip_stats(self.native)


@dataclasses.dataclass
class TargetSpec:
    kind: str  # corpus | program
    name: str  # corpus name or program seed
    option: str = "default"

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}:{self.option}"

    @classmethod
    def parse(cls, key: str) -> TargetSpec:
        kind, name, option = key.split(":")
        return cls(kind, name, option)

    def build(self, sides: str = "both") -> Target:
        return build(self, sides)


@dataclasses.dataclass
class Target:
    spec: TargetSpec
    entry: Any  # the eager callable (module or function)
    compiled: Any
    args: tuple
    kwargs: dict
    units: list[CheckUnit]
    program_source: str | None = None
    stack: contextlib.ExitStack | None = None
    plain: Any = None  # plain torch.compile of the same entry, same options (e2e)
    function: Any = None  # the entry frame's function (read at build: a mutation may rebind forward)

    def entry_function(self) -> Any:
        """The Python function of the entry frame (``forward`` or ``fn``)."""
        return self.function

    def close(self) -> None:
        if self.stack is not None:
            self.stack.close()
        torch._dynamo.reset()
        plugin.clear_units()


def _option(option: str) -> tuple[dict, dict]:
    if option in FILTERS:
        return {"options": {"guard_filter_fn": getattr(torch.compiler, option)}}, {}
    if option == "install_free_tensors":
        return {}, {"install_free_tensors": True}
    if option == "dict_tags":
        return {}, {"use_recursive_dict_tags_for_guards": True}
    if option in ("default", "multi_entry"):
        return {}, {}
    raise ValueError(f"unknown option {option!r} (expected one of {', '.join(OPTIONS)})")


@contextlib.contextmanager
def _capture() -> Any:
    """Per unit built inside: (Dynamo's root, installed root, f_locals,
    scope without L, code). guardjit reports the roots
    (plugin.observe_units); torch's testing hook, which runs inside
    CheckFunctionManager.__init__ before the observer, gives the scope.
    A plain-torch-only target needs the hooks too: guardjit is not active
    for its compiles, so it converts none of them and only reports Dynamo's
    roots."""
    plugin.install_hooks()
    prev = dynamo_guards.guard_manager_testing_hook_fn
    scopes: dict[int, list[dict]] = {}
    got: list[tuple] = []

    def hook(wrapper: Any, f_locals: Any, builder: Any) -> None:
        if prev is not None:
            prev(wrapper, f_locals, builder)
        scope = {k: v for k, v in getattr(builder, "scope", {}).items() if k != "L"}
        scopes.setdefault(id(getattr(builder, "f_code", None)), []).append(scope)

    def seen(dynamo_root: Any, final_root: Any, f_locals: Any, code: Any) -> None:
        pending = scopes.get(id(code)) or [{}]
        got.append((dynamo_root, final_root, f_locals, pending.pop(0), code))

    dynamo_guards.guard_manager_testing_hook_fn = hook
    try:
        with plugin.observe_units(seen):
            yield got
    finally:
        dynamo_guards.guard_manager_testing_hook_fn = prev


def tree_sources(root: Any) -> list[str]:
    out, stack, seen = [], [root], set()
    while stack:
        m = stack.pop()
        src = m.get_source()
        if src not in seen:
            seen.add(src)
            out.append(src)
        stack.extend(reversed(m.get_child_managers()))
    return out


def _variants(args: tuple) -> list[tuple]:
    """Inputs that recompile (multi_entry): the first float tensor argument
    in float64, then with its first size + 1."""
    out = []
    idx = next((i for i, a in enumerate(args) if isinstance(a, torch.Tensor)), None)
    if idx is None:
        return out
    t = args[idx]
    if t.is_floating_point():
        out.append(args[:idx] + (t.double(),) + args[idx + 1:])
    if t.dim() > 0:
        grown = torch.cat([t, t[:1]], 0)
        out.append(tuple(grown if a is t else a for a in args))
    return out


SIDES = ("both", "guardjit", "plain")


def build(spec: TargetSpec, sides: str = "both") -> Target:
    """Compiles the target. ``sides``: ``both`` (guardjit's compile, and plain
    torch's in ``Target.plain`` for the end-to-end sample), ``guardjit`` (no
    plain compile) or ``plain`` (``Target.compiled`` is plain
    ``torch.compile``, guardjit's hooks are not installed and every unit is on
    Dynamo's path): the last two are the fresh-process replays of
    :mod:`guardjit.fuzz.isolate`."""
    if sides not in SIDES:
        raise ValueError(f"unknown sides {sides!r} (expected one of {', '.join(SIDES)})")
    torch._dynamo.reset()
    plugin.clear_units()
    source = None
    if spec.kind == "corpus":
        from guardjit.bench.corpus import CORPUS

        case = CORPUS[spec.name](True)
        entry, (args, kwargs) = case.model, case.inputs()
    elif spec.kind == "program":
        from guardjit.fuzz import programs

        prog = programs.generate(int(spec.name))
        mod = prog.load()
        entry, args, kwargs, source = mod.ENTRY, mod.ARGS(), {}, prog.source
    else:
        raise ValueError(f"unknown target kind {spec.kind!r}")
    compile_kwargs, config = _option(spec.option)
    stack = contextlib.ExitStack()
    stack.enter_context(torch._dynamo.config.patch(**config))
    plugin.config.keep_units = True
    plugin.config.keep_frame_locals = True
    try:
        with _capture() as got:
            compiled = (torch.compile(entry, backend="eager", **compile_kwargs) if sides == "plain"
                        else guardjit.compile(entry, backend="eager", **compile_kwargs))
            compiled(*args, **kwargs)
            if spec.option == "multi_entry":
                for v in _variants(args):
                    try:
                        entry(*v, **kwargs)  # a variant eager rejects is skipped
                    except Exception:  # noqa: BLE001
                        continue
                    compiled(*v, **kwargs)
        records = plugin.units()
        # The checks the cases compare are the tier-up's code (docs/plugin.md
        # "The background tier"), not the first code a swap would replace
        # mid-run.
        plugin.wait_for_tier_up()
        # Plain torch with the same options, its own cache entries (backend
        # objects differ), for the end-to-end sample.
        plain = None
        if sides == "both":
            from guardjit.bench.run import SideBackend

            # Its own options dict: the compile above popped guard_filter_fn
            # from compile_kwargs' (torch.compile does, torch/__init__.py).
            plain_kwargs, _ = _option(spec.option)
            plain = torch.compile(entry, backend=SideBackend("eager", "torch"), **plain_kwargs)
            plain(*args, **kwargs)
    finally:
        plugin.config.keep_units = False
        plugin.config.keep_frame_locals = False
    units = []
    for dyn_root, root, f_locals, scope, code in got:
        rec = next((u for u in records if u.native_root is root and root is not None), None)
        if rec is None:  # left on Dynamo's path: Dynamo's root is installed
            rec_status, interp, native, text, ir = "dynamo", None, None, "", None
        else:
            rec_status, interp, native, ir = rec.status, rec.bound.interpret, rec.check, rec.ir
            text = rec.ir.print() if rec.ir is not None else ""
        if not isinstance(f_locals, dict):
            continue
        fl = dict(f_locals)
        if not dyn_root.check(fl):  # stale compile-time locals (transformers kwargs)
            fl = _entry_locals(entry, args, kwargs, code)
            if fl is None or not dyn_root.check(fl):
                continue
        env_srcs = tree_sources(dyn_root)
        units.append(CheckUnit(
            name=str(getattr(rec, "name", "?")), status=rec_status, dynamo_root=dyn_root,
            root=root, interpret=interp, native=native, f_locals=fl, scope=scope, code=code,
            sources=env_srcs, tensor_sources=_tensor_sources(env_srcs, fl, scope),
            ir_text=text, ir=ir))
    fn = entry.forward if isinstance(entry, torch.nn.Module) else entry
    return Target(spec, entry, compiled, args, kwargs, units, source, stack, plain,
                  getattr(fn, "__func__", fn))


def _entry_locals(entry: Any, args: tuple, kwargs: dict, code: Any) -> dict | None:
    from guardjit.lab.routing import capture_locals

    if code is None:
        return None
    _, fl = capture_locals(code, lambda: entry(*args, **kwargs))
    return fl


def _tensor_sources(sources: list[str], fl: dict, scope: dict) -> list[str]:
    from guardjit.fuzz.mutations import Env

    env = Env(fl, scope)
    out = []
    for s in sources:
        try:
            if isinstance(env.eval(s), torch.Tensor):
                out.append(s)
        except Exception:  # noqa: BLE001 - a source that needs more than L and G
            pass
    return out


def call_args(target: Target, f_locals: dict) -> tuple[tuple, dict] | None:
    """The call of the entry frame whose frame locals are ``f_locals`` (None
    if ``self`` was replaced or a parameter is missing)."""
    fn = target.entry_function()
    sig = inspect.signature(fn)
    args, kwargs = [], {}
    params = list(sig.parameters.values())
    if isinstance(target.entry, torch.nn.Module):
        if f_locals.get("self") is not target.entry:
            return None
        params = params[1:]
    for p in params:
        if p.name not in f_locals:
            return None
        v = f_locals[p.name]
        if p.kind is p.VAR_POSITIONAL:
            args.extend(v)
        elif p.kind is p.VAR_KEYWORD:
            kwargs.update(v)
        elif p.kind is p.KEYWORD_ONLY:
            kwargs[p.name] = v
        else:
            args.append(v)
    return tuple(args), kwargs
