"""Serve bundles: AOTInductor packages of one model with their portable guards.

:func:`export_bundle` writes, for a model and several shape / dtype buckets
of example inputs, the directory a C++ host without Python serves from
(``tools/guardjit-serve``; the format is ``guardjit-serve/1``, described in
docs/serving.md):

* per bucket (an *artifact*): the AOTInductor package
  (``torch.export.export`` + ``torch._inductor.aoti_compile_and_package``)
  and the **portable** guard set of the compile unit that
  ``torch.compile(model, dynamic=False, fullgraph=True)`` builds for the
  same inputs;
* ``select.gir``: one differentiating set per artifact (guardjit's
  ``diffset<minimal>`` pass over the portable sets, as for the cache entries
  of one code object under the ``skip_guard_eval_unsafe`` stance);
* ``manifest.json``: the flat input order of the packages' runner with the
  Dynamo source of each input, the files, the guard counts (guardjit's and
  torch's) and what was dropped;
* ``global_state.json``: the GlobalStateGuard JSON of the exporting process.

The steps (numbered in :func:`export_bundle`):

1. ``torch.export.export`` per bucket; the runner's flat input order is the
   pytree flattening of ``(args, kwargs)`` under the program's ``in_spec``
   (what ``AOTICompiledModel.__call__`` passes to the loader), tensors only;
   each leaf's key path plus ``forward``'s signature gives its Dynamo source
   (``L['x']``, ``L['xs'][0]``, ``L['kwargs']['mask']``).
2. One ``torch.compile`` of the model through guardjit's recorder, called
   once per bucket (one cache entry, one compile unit per bucket). Its
   ``guard_filter_fn`` is torch's ``keep_portable_guards_unsafe`` further
   restricted to guards on the input sources plus GLOBAL_STATE and
   SHAPE_ENV: torch rebuilds its tree from those guards (installing
   NO_TENSOR_ALIASING over the kept tensors only), and the recorder records
   that tree. The filter also counts torch's own guards: all of them, after
   ``keep_portable_guards_unsafe``, and the ones dropped (parameters and
   buffers are constants of the package, not request inputs).
3. guardjit's ``keep_portable_guards_unsafe`` pass runs over each recorded
   set (``PortableSet::load`` runs it again; it is a fixed point here), and
   every guard left must be one the portable checker evaluates, on an input
   source or on none.
4. ``_core.diffsets(sets, "minimal")`` over the portable sets in cache order.
5. ``aoti_compile_and_package`` per bucket (slow: tens of seconds each).
6. Example inputs and eager outputs per artifact, the manifest.

What ``select`` guarantees (docs/diffsets.md, "The condition"; R_i is a
subset of the portable set G_i): for a request that passes some artifact's
full portable set, the first artifact, in any order, whose select set passes
is one whose full portable set also passes, provided the checker evaluates
both with the same semantics. A host that then runs the chosen artifact's
full portable set therefore dispatches only to an artifact whose full set
passes; a request that passes no full set is rejected by that check.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch

FORMAT = "guardjit-serve/1"

# The policy of the select sets: the host runs the chosen artifact's full
# portable set after selecting, so the smallest sets that route every
# accepted request correctly suffice (docs/diffsets.md, Policies).
SELECT_POLICY = "minimal"

SELECT_GUARANTEE = (
    "each select set is a subset of its artifact's portable set (diffset<minimal> over the "
    "portable sets); for a request that passes some artifact's full portable set, the first "
    "artifact in any order whose select set passes has a full portable set that passes too; "
    "run the chosen artifact's full portable set before dispatching: a request that passes "
    "no full set is rejected only by that check")

# Guard kinds (Dynamo's names, GuardSet.count_by_kind) the portable checker
# evaluates (include/guardjit/portable.h).
PORTABLE_KINDS = frozenset({"TENSOR_MATCH", "DIMENSION_DYNAMIC_MARKING_GUARD",
                            "NO_TENSOR_ALIASING", "GLOBAL_STATE", "SHAPE_ENV"})

# Dynamo guard types kept whatever their source: they guard no input value.
_SOURCELESS = frozenset({"GLOBAL_STATE", "SHAPE_ENV"})


class ServeExportError(RuntimeError):
    """A bundle cannot be written for this model or these buckets."""


@dataclasses.dataclass
class Bucket:
    """One artifact's example call: ``model(*args, **kwargs)``."""

    args: tuple
    kwargs: dict = dataclasses.field(default_factory=dict)
    name: str | None = None
    #: The model this bucket's package is built from, when it is not the
    #: bundle's (e.g. a bfloat16 copy for a bfloat16 bucket); same class and
    #: forward, other weights or dtype.
    model: torch.nn.Module | None = None


@dataclasses.dataclass
class ServeCase:
    """What a ``--serve`` factory may return: the model and its buckets."""

    name: str
    model: torch.nn.Module
    buckets: list  # of Bucket or tuples of positional args


@dataclasses.dataclass
class InputSpec:
    name: str  # the placeholder's name in the exported program
    source: str  # the Dynamo source of the value, e.g. "L['x']"
    kind: str = "tensor"


# --- 1. inputs: the runner's flat order and the Dynamo sources -------------

def _as_bucket(b: Any) -> Bucket:
    if isinstance(b, Bucket):
        return Bucket(tuple(b.args), dict(b.kwargs), b.name, b.model)
    if isinstance(b, tuple):
        return Bucket(b)
    if isinstance(b, list):
        return Bucket(tuple(b))
    if isinstance(b, torch.Tensor):
        return Bucket((b,))
    raise ServeExportError(f"a bucket is a tuple of example inputs or a serving.Bucket, "
                           f"got {type(b).__name__}")


def _flat_tensors(args: tuple, kwargs: dict) -> list:
    from torch.utils import _pytree as pytree

    leaves = pytree.tree_leaves((args, kwargs))
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def bucket_name(b: Bucket) -> str:
    """``b<dim 0>_<dtype>`` of the first tensor input, e.g. ``b4_float32``."""
    ts = _flat_tensors(b.args, b.kwargs)
    if not ts:
        return "bucket"
    t = ts[0]
    batch = f"b{t.shape[0]}_" if t.dim() else "scalar_"
    return batch + str(t.dtype).removeprefix("torch.")


def _key_source(key: Any) -> str:
    from torch.utils import _pytree as pytree

    if isinstance(key, pytree.SequenceKey):
        return f"[{key.idx}]"
    if isinstance(key, pytree.MappingKey):
        return f"[{key.key!r}]"
    if isinstance(key, pytree.GetAttrKey):
        return f".{key.name}"
    raise ServeExportError(f"cannot name the Dynamo source of pytree key {key!r}")


def input_specs(model: torch.nn.Module, ep: Any, args: tuple, kwargs: dict,
                constants: list | None = None) -> list[InputSpec]:
    """The inputs of the AOTInductor runner, in its order, with the Dynamo
    source of each (derived from ``ep``'s in_spec and ``forward``'s
    signature, never from parameter names guessed). Non-tensor inputs are
    not runner inputs: each is appended to ``constants`` as ``{"source",
    "value"}`` (its repr), the value the package bakes in."""
    from torch.export.graph_signature import InputKind as EpInputKind
    from torch.export.graph_signature import TensorArgument
    from torch.utils import _pytree as pytree
    from torch.export._tree_utils import reorder_kwargs

    in_spec = ep.call_spec.in_spec
    kwargs = reorder_kwargs(kwargs, in_spec) if in_spec is not None else kwargs
    flat, spec = pytree.tree_flatten_with_path((args, kwargs))
    if in_spec is not None and spec != in_spec:
        raise ServeExportError("the exported program's input structure differs from the "
                               "example's")
    sig = inspect.signature(model.forward)
    params = list(sig.parameters.values())
    positional = [p for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_pos = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    var_kw = next((p.name for p in params if p.kind == p.VAR_KEYWORD), None)
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}

    sources = []
    for path, leaf in flat:
        group, first, rest = path[0].idx, path[1], path[2:]
        if group == 0:  # positional
            i = first.idx
            if i < len(positional):
                src = f"L[{positional[i].name!r}]"
            elif var_pos is not None:
                src = f"L[{var_pos!r}][{i - len(positional)}]"
            else:
                raise ServeExportError(f"positional input {i} has no parameter in forward")
        else:
            k = first.key
            if k in named:
                src = f"L[{k!r}]"
            elif var_kw is not None:
                src = f"L[{var_kw!r}][{k!r}]"
            else:
                raise ServeExportError(f"keyword input {k!r} has no parameter in forward")
        src += "".join(_key_source(k) for k in rest)
        if not isinstance(leaf, torch.Tensor):
            # torch.export specializes it: the package computes with this
            # value whatever a request holds (the runner takes tensors only).
            # Recorded in the manifest; _check_constants refuses buckets
            # that differ in it.
            if constants is not None:
                constants.append({"source": src, "value": repr(leaf)})
            continue
        sources.append(src)

    users = [s for s in ep.graph_signature.input_specs if s.kind == EpInputKind.USER_INPUT]
    user_tensors = [s for s in users if isinstance(s.arg, TensorArgument)]
    if len(user_tensors) != len(sources):
        raise ServeExportError(f"the exported program takes {len(user_tensors)} tensor inputs, "
                               f"the example has {len(sources)}")
    return [InputSpec(s.arg.name, src) for s, src in zip(user_tensors, sources)]


def _mutated_sources(ep: Any, specs: list[InputSpec]) -> list[str]:
    """The sources of the inputs the exported program writes in place (a
    host must not pass such an input overlapping another: the package reads
    the other after the write, eager before). torch.export's graph keeps
    ``add_`` as it is; ``user_inputs_to_mutate`` is filled after
    ``run_decompositions`` (which aoti_compile_and_package runs too)."""
    names = set(ep.run_decompositions().graph_signature.user_inputs_to_mutate.values())
    by_name = {s.name: s.source for s in specs}
    unknown = names - by_name.keys()
    if unknown:
        raise ServeExportError(f"the program writes inputs {sorted(unknown)} that are not "
                               "request tensors")
    return [by_name[n] for n in sorted(names, key=list(by_name).index)]


_ABSENT = object()


def _check_constants(buckets: list[Bucket], names: list[str]) -> None:
    """Raises when a non-tensor input differs between buckets. Each package
    bakes in its bucket's value (torch.export specializes it) and a request
    carries only the tensors, so the host would answer with a value chosen by
    the request's shape or dtype: a result eager gives for no single call."""
    from torch.utils import _pytree as pytree

    def constants(b: Bucket) -> dict[str, Any]:
        flat, _ = pytree.tree_flatten_with_path((b.args, b.kwargs))
        return {pytree.keystr(path): leaf for path, leaf in flat
                if not isinstance(leaf, torch.Tensor)}

    first = constants(buckets[0])
    for b, n in zip(buckets[1:], names[1:]):
        for key, value in constants(b).items():
            old = first.get(key, _ABSENT)
            if not (value is old or (type(value) is type(old) and bool(value == old))):
                was = "absent" if old is _ABSENT else repr(old)
                raise ServeExportError(
                    f"bucket {n}: non-tensor input {key} is {value!r}, {was} in bucket "
                    f"{names[0]}: a request carries only tensors, so each package would "
                    "bake in its own value; export one bundle per value")


# --- 2. guards: one compile unit per bucket ---------------------------------

@dataclasses.dataclass
class _TorchCounts:
    full: int = 0
    portable: int = 0
    kept: int = 0
    dropped: Counter = dataclasses.field(default_factory=Counter)


def _drop_reason(entry: Any) -> str:
    if entry.guard_type == "TENSOR_MATCH":
        value = entry.value if entry.has_value else None
        return "parameter" if isinstance(value, torch.nn.Parameter) else "buffer"
    return "non_input_source"


def _make_filter(sources: set[str], log: list[_TorchCounts]) -> Callable[[list], list]:
    import torch.compiler

    def keep(entries: list) -> list[bool]:
        portable = torch.compiler.keep_portable_guards_unsafe(entries)
        c = _TorchCounts(full=len(entries), portable=sum(map(bool, portable)))
        out = []
        for e, p in zip(entries, portable):
            k = bool(p) and (e.guard_type in _SOURCELESS or e.orig_guard.name in sources)
            if p and not k:
                c.dropped[_drop_reason(e)] += 1
            out.append(k)
        c.kept = sum(out)
        log.append(c)
        return out

    return keep


def _compile_units(model: torch.nn.Module, buckets: list[Bucket], names: list[str],
                   sources: list[str], progress: Callable[[str], None]) -> tuple[list, list, str]:
    """Calls the model once per bucket under one guardjit ``torch.compile``;
    returns (unit per bucket, torch's counts per bucket, global state JSON)."""
    import guardjit
    from guardjit import plugin

    if not guardjit.enabled():
        raise ServeExportError("guardjit cannot run here (see the warning above)")
    torch._dynamo.reset()
    plugin.clear_units()
    keep_units = plugin.config.keep_units
    plugin.config.keep_units = True
    counts: list[_TorchCounts] = []
    units = []
    try:
        keep = _make_filter(set(sources), counts)
        compiled_for: dict[int, Any] = {}

        def compiled_model(m: torch.nn.Module) -> Any:
            if id(m) not in compiled_for:
                compiled_for[id(m)] = guardjit.compile(
                    m, backend="eager", dynamic=False, fullgraph=True,
                    options={"guard_filter_fn": keep})
            return compiled_for[id(m)]
        limit = max(8, len(buckets) + 1)
        with torch._dynamo.config.patch(recompile_limit=limit,
                                        accumulated_recompile_limit=max(256, limit)), \
                torch.no_grad():
            for b, name in zip(buckets, names):
                seen, n_counts = len(plugin.units()), len(counts)
                try:
                    compiled_model(b.model or model)(*b.args, **b.kwargs)
                except Exception as e:
                    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                    raise ServeExportError(
                        f"bucket {name}: torch.compile(fullgraph=True) failed (the bundle needs "
                        f"one graph per bucket): {type(e).__name__}: {first}") from e
                new = plugin.units()[seen:]
                if not new:
                    prev = names[:len(units)]
                    raise ServeExportError(
                        f"bucket {name}: hit the compile unit of an earlier bucket "
                        f"({', '.join(prev)}): its guards do not tell them apart")
                if len(new) != 1 or len(counts) != n_counts + 1:
                    raise ServeExportError(f"bucket {name}: {len(new)} compile units, "
                                           "expected one")
                u = new[0]
                if u.status == "dynamo" or u.recorded_ir is None:
                    # Its recorded IR may be incomplete (export.py's rule).
                    raise ServeExportError(f"bucket {name}: compile unit {u.name} stayed on "
                                           f"Dynamo's path ({u.reason})")
                units.append(u)
                progress(f"{name}: compile unit {u.name}, {counts[-1].full} Dynamo guards, "
                         f"{counts[-1].kept} kept")
            global_state = torch._C._dynamo.guards.GlobalStateGuard().__getstate__()
        return units, counts, global_state
    finally:
        plugin.config.keep_units = keep_units
        plugin.clear_units()
        # The filter dropped every guard on the module: entries left in the
        # cache of forward's code would serve other instances of the class.
        torch._dynamo.reset()


def _ir_sources(ir: Any) -> set[str]:
    return {m.group(1) for m in re.finditer(r'^\s*guard \S+ .*?source="((?:[^"\\]|\\.)*)"',
                                            ir.print(), re.M)}


def portable_set(unit: Any, name: str, sources: list[str]) -> Any:
    """The unit's recorded set after guardjit's keep_portable_guards_unsafe,
    renamed ``name``; raises ServeExportError on a guard the portable
    checker cannot evaluate or on an input the set does not guard."""
    from guardjit import _core

    ir = unit.recorded_ir.copy()
    _core.run_pipeline(ir, "keep_portable_guards_unsafe")
    ir.name = name
    kinds = ir.count_by_kind()
    bad = sorted(set(kinds) - PORTABLE_KINDS)
    if bad:
        raise ServeExportError(f"{name}: guards the portable checker cannot evaluate: "
                               f"{', '.join(bad)}")
    guarded = _ir_sources(ir)
    missing = [s for s in sources if s not in guarded]
    if missing:
        raise ServeExportError(f"{name}: no guard on the inputs {missing} (the input order "
                               "and the compile unit disagree)")
    return ir


# --- the bundle --------------------------------------------------------------

def _raw_tensors(tensors: list, path: str) -> list[dict]:
    """Writes the tensors' bytes (each made contiguous) one after another;
    returns their descriptions."""
    out, at = [], 0
    with open(path, "wb") as f:
        for t in tensors:
            c = t.detach().contiguous().cpu()
            data = c.view(torch.uint8).numpy().tobytes() if c.numel() else b""
            out.append({"dtype": str(c.dtype).removeprefix("torch."), "sizes": list(c.shape),
                        "strides": list(c.stride()), "offset": at, "nbytes": len(data)})
            f.write(data)
            at += len(data)
    return out


def _gir_text(ir: Any) -> str:
    from guardjit import stable_text
    from guardjit.embedding import version_header

    return version_header() + "\n" + stable_text.normalize(ir.print())


def _stderr_progress(msg: str) -> None:
    print(f"guardjit export --serve: {msg}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class Bundle:
    """What :func:`build_bundle` wrote, with the sets still in memory."""

    out_dir: str
    manifest: dict
    sets: list  # per artifact, its portable GuardSet (what <name>.gir holds)
    select: list  # per artifact, its select GuardSet (in select.gir)
    inputs: list[InputSpec]
    # The compile units: their bound sets keep the objects that `sets` and
    # `select` borrow alive (bind them only while this lives).
    units: list


def export_bundle(model: torch.nn.Module, buckets: Sequence[Any], out_dir: str, *,
                  name: str | None = None, examples: bool = True,
                  progress: Callable[[str], None] | bool = True) -> dict:
    """Writes the serve bundle of ``model`` for ``buckets`` into ``out_dir``
    and returns its manifest (see :func:`build_bundle`)."""
    return build_bundle(model, buckets, out_dir, name=name, examples=examples,
                        progress=progress).manifest


def build_bundle(model: torch.nn.Module, buckets: Sequence[Any], out_dir: str, *,
                 name: str | None = None, examples: bool = True,
                 progress: Callable[[str], None] | bool = True) -> Bundle:
    """Writes the serve bundle of ``model`` for ``buckets`` into ``out_dir``.

    ``buckets``: one entry per artifact, each a tuple of positional example
    inputs or a :class:`Bucket` (args, kwargs, optional name; default name
    ``b<dim 0>_<dtype>`` of the first tensor). ``progress``: True prints
    progress lines on stderr, a callable receives them, False is silent.
    Raises :class:`ServeExportError` when the model does not export or
    compile as one graph per bucket, or two buckets share guards.
    """
    from guardjit import _core

    say = (_stderr_progress if progress is True else progress) if progress else (lambda m: None)
    if not isinstance(model, torch.nn.Module):
        raise ServeExportError(f"the model must be a torch.nn.Module, got {type(model).__name__}")
    bs = [_as_bucket(b) for b in buckets]
    if not bs:
        raise ServeExportError("no buckets")
    names = []
    for b in bs:
        n = b.name or bucket_name(b)
        base, k = n, 2
        while n in names:
            n, k = f"{base}_{k}", k + 1
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", n):
            raise ServeExportError(f"bucket name {n!r}: use letters, digits, '_', '.', '-'")
        names.append(n)
    model_name = name or type(model).__name__
    os.makedirs(out_dir, exist_ok=True)
    t_start = time.perf_counter()

    # 1. Export each bucket; one input order for all.
    eps, inputs = [], None
    mutated: list[list[str]] = []  # per bucket: the input sources the package writes
    for i, (b, n) in enumerate(zip(bs, names)):
        say(f"[{i + 1}/{len(bs)}] {n}: torch.export.export")
        try:
            ep = torch.export.export(b.model or model, b.args, b.kwargs)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise ServeExportError(f"bucket {n}: torch.export.export failed: "
                                   f"{type(e).__name__}: {first}") from e
        baked: list = []
        specs = input_specs(model, ep, b.args, b.kwargs, baked)
        constants = baked if i == 0 else constants
        if inputs is not None and [s.source for s in specs] != [s.source for s in inputs]:
            raise ServeExportError(f"bucket {n}: inputs {[s.source for s in specs]} differ "
                                   f"from the first bucket's {[s.source for s in inputs]}")
        inputs = inputs or specs
        eps.append(ep)
        mutated.append(_mutated_sources(ep, specs))
    assert inputs is not None
    sources = [s.source for s in inputs]
    _check_constants(bs, names)
    for c in constants:
        say(f"non-tensor input {c['source']} = {c['value']} is baked into every package "
            "(a request carries tensors only)")

    # 2. Guards: one compile unit per bucket, torch's filter + the inputs.
    say("torch.compile(dynamic=False) through guardjit's recorder, one call per bucket")
    # The example files hold the inputs as given: a model that mutates an
    # input would change them in the compile calls and in eager's call.
    given = copy.deepcopy([(b.args, b.kwargs) for b in bs]) if examples else None
    units, counts, global_state = _compile_units(model, bs, names, sources, say)

    # 3. The portable sets.
    sets = [portable_set(u, n, sources) for u, n in zip(units, names)]

    # 4. Select sets: the cache holds the last compile at the front.
    order = list(range(len(sets)))[::-1]
    result = _core.diffsets([sets[i] for i in order], SELECT_POLICY)
    reduced: list[Any] = [None] * len(sets)
    unit_stats: list[dict] = [{}] * len(sets)
    for pos, i in enumerate(order):
        reduced[i], unit_stats[i] = result["sets"][pos], dict(result["units"][pos])
        reduced[i].name = names[i]

    # 5. AOTInductor packages.
    from torch._inductor import aoti_compile_and_package

    package_s = []
    for i, (ep, n) in enumerate(zip(eps, names)):
        say(f"[{i + 1}/{len(bs)}] {n}: aoti_compile_and_package (slow)")
        t0 = time.perf_counter()
        path = os.path.join(out_dir, f"{n}.pt2")
        try:
            aoti_compile_and_package(ep, package_path=path)
        except Exception as e:
            raise ServeExportError(f"bucket {n}: aoti_compile_and_package failed: "
                                   f"{type(e).__name__}: {e}") from e
        package_s.append(time.perf_counter() - t0)
        say(f"[{i + 1}/{len(bs)}] {n}: {path} in {package_s[-1]:.1f} s")

    # 6. Files and manifest.
    artifacts = []
    for i, (b, n) in enumerate(zip(bs, names)):
        text = _gir_text(sets[i])
        order = _check_loads(text, f"{n}.gir", n, inputs)
        with open(os.path.join(out_dir, f"{n}.gir"), "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        c = counts[i]
        a: dict[str, Any] = {
            "name": n, "package": f"{n}.pt2", "guards": f"{n}.gir", "set": n,
            "check_inputs": order,
            "dropped": dict(sorted(c.dropped.items())),
            "guard_counts": {
                "guardjit_portable": sets[i].num_guards,
                "guardjit_portable_by_kind": sets[i].count_by_kind(),
                "torch_full": c.full,
                "torch_keep_portable": c.portable,
                "torch_kept": c.kept,
                "select": reduced[i].num_guards,
            },
            "select_stats": unit_stats[i],
            "package_compile_s": round(package_s[i], 2),
            "mutates": mutated[i],
        }
        if examples:
            args, kwargs = given[i]
            flat = _flat_tensors(args, kwargs)
            args, kwargs = copy.deepcopy((args, kwargs))
            with torch.no_grad():
                expected = _flat_tensors(((b.model or model)(*args, **kwargs),), {})
            torch.save(flat, os.path.join(out_dir, f"{n}.inputs.pt"))
            torch.save(expected, os.path.join(out_dir, f"{n}.expected.pt"))
            a["example"] = f"{n}.inputs.pt"
            a["expected"] = f"{n}.expected.pt"
            for key, ts, stem in (("example_raw", flat, "inputs"),
                                  ("expected_raw", expected, "expected")):
                file = f"{n}.{stem}.bin"
                a[key] = {"file": file, "tensors": _raw_tensors(ts, os.path.join(out_dir, file))}
        artifacts.append(a)
    text = _gir_text_many(reduced)
    select_inputs = {n: _check_loads(text, "select.gir", n, inputs) for n in names}
    with open(os.path.join(out_dir, "select.gir"), "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    with open(os.path.join(out_dir, "global_state.json"), "w", encoding="utf-8") as f:
        f.write(global_state)

    import guardjit

    manifest = {
        "format": FORMAT,
        "torch": torch.__version__,
        "guardjit": guardjit.__version__,
        "model": model_name,
        "inputs": [dataclasses.asdict(s) for s in inputs],
        # Non-tensor inputs, equal in every bucket (_check_constants): each
        # package computes with these values whatever a request holds.
        "constants": constants,
        "artifacts": artifacts,
        "select": {"file": "select.gir", "policy": SELECT_POLICY,
                   "sets": {n: n for n in names}, "check_inputs": select_inputs,
                   "guarantee": SELECT_GUARANTEE},
        "global_state": "global_state.json",
        "export_s": round(time.perf_counter() - t_start, 2),
    }
    with open(os.path.join(out_dir, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    say(f"wrote {os.path.join(out_dir, 'manifest.json')} ({len(artifacts)} artifacts, "
        f"{manifest['export_s']:.0f} s)")
    return Bundle(out_dir, manifest, sets, reduced, inputs, units)


def _check_loads(text: str, file: str, set_name: str, inputs: list[InputSpec]) -> list[int]:
    """The portable checker loads the set ``set_name`` of ``text`` and reads
    only inputs of the manifest. Returns, per input of
    ``PortableSet::inputs()`` (in that order: the order of the guards, not
    the runner's), its index in ``inputs``."""
    from guardjit import _core

    try:
        loaded = {s.name: s for s in _core.portable_load(text, file)}
    except ValueError as e:
        raise ServeExportError(f"{file}: the portable checker rejects it: {e}") from e
    if set_name not in loaded:
        raise ServeExportError(f"{file}: no set {set_name!r}")
    known = {(i.source, i.kind): k for k, i in enumerate(inputs)}
    extra = [src for src, kind in loaded[set_name].inputs if (src, kind) not in known]
    if extra:
        raise ServeExportError(f"{file}: set {set_name} reads {extra}, not inputs of the "
                               "package")
    return [known[(src, kind)] for src, kind in loaded[set_name].inputs]


def _gir_text_many(sets: list) -> str:
    from guardjit import stable_text
    from guardjit.embedding import version_header

    return version_header() + "\n" + "\n".join(stable_text.normalize(s.print()) for s in sets)


# --- the portable checker from Python (include/guardjit/portable.h) ----------

# torch dtype -> DLDataType (code, bits), as torch's DLPack export names them.
_DLPACK_DTYPES = {
    torch.float32: (2, 32), torch.float64: (2, 64), torch.float16: (2, 16),
    torch.bfloat16: (4, 16), torch.int64: (0, 64), torch.int32: (0, 32),
    torch.int16: (0, 16), torch.int8: (0, 8), torch.uint8: (1, 8), torch.bool: (6, 8),
}
_DLPACK_DEVICES = {"cpu": 1, "cuda": 2}


def portable_input(t: torch.Tensor, ext: bool = True) -> dict:
    """What a host hands ``PortableSet::check`` for tensor ``t``: the DLTensor
    fields and, with ``ext``, the TensorExt ones (the dispatch keys with this
    thread's included / excluded keys applied, as a host computes them)."""
    code, bits = _DLPACK_DTYPES[t.dtype]
    d = {"sizes": list(t.shape), "strides": list(t.stride()), "code": code, "bits": bits,
         "device_type": _DLPACK_DEVICES[t.device.type],
         "device_id": t.device.index or 0, "data_ptr": t.data_ptr()}
    if ext:
        keys = ((torch._C._dispatch_keys(t).raw_repr()
                 | torch._C._dispatch_tls_local_include_set().raw_repr())
                & ~torch._C._dispatch_tls_local_exclude_set().raw_repr())
        cls = type(t)
        d.update(requires_grad=t.requires_grad, dispatch_keys=keys,
                 python_type=f"{cls.__module__}.{cls.__qualname__}",
                 storage_offset=t.storage_offset())
    return d


def load_portable(path: str) -> dict:
    """Every set of a bundle's .gir file, loaded by the portable checker
    (``PortableSet::load``, keep_portable_guards_unsafe first), by name."""
    from guardjit import _core

    with open(path, encoding="utf-8") as f:
        sets = _core.portable_load(f.read(), os.path.basename(path))
    return {s.name: s for s in sets}


# --- a small model for tests, the bench and the walk-through -----------------

class TinyServeModel(torch.nn.Module):
    """Linear + ReLU + a buffer; takes float32 or bfloat16 input."""

    def __init__(self, d_in: int = 16, d_out: int = 8) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(d_in, d_out)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x.float())) * self.scale


def tiny(batches: Sequence[int] = (1, 4, 16), bf16_batch: int | None = 1) -> ServeCase:
    """The tiny model with float32 buckets of ``batches`` and a bfloat16 one."""
    torch.manual_seed(0)
    model = TinyServeModel().eval()
    buckets = [(torch.randn(b, 16),) for b in batches]
    if bf16_batch is not None:
        buckets.append((torch.randn(bf16_batch, 16, dtype=torch.bfloat16),))
    return ServeCase("tiny", model, buckets)
