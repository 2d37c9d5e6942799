"""``python -m guardjit bench --suite generate``: a transformers ``generate()`` decode loop.

What a user serving a model sees (docs/performance.md, "How it is
measured"): greedy ``generate()`` with a static cache
(``cache_implementation="static"``) on a Qwen3 model with tiny widths (the
corpus's ``qwen3-36L`` config, with its cache on), in one process:

1. **Eager reference.** The uncompiled model generates the reference tokens.
2. **Sides.** A deep copy of the model per side, its forward compiled the way
   transformers compiles it: ``generate`` runs the prefill uncompiled and
   every decode step through ``model.get_compiled_call(compile_config)``,
   a compile of ``model.__call__`` kept in ``model._compiled_call``. The
   bench puts its own compile there (``fullgraph=True``, ``--backend``,
   default ``eager``), one per side: plain ``torch.compile``, ``guardjit``
   (``guardjit.compile``), ``unsafe`` (torch with ``install_free_tensors``
   and ``skip_guard_on_all_nn_modules_unsafe``, options.UNSAFE) and
   ``floor`` (torch with ``skip_all_guards_unsafe``: no guards). Each side
   has a backend of its own (run.SideBackend), which counts the graphs it
   compiles.
3. **Rounds.** Sides alternate within each round (eager too): one timed
   ``generate`` per side (``token_us`` = its wall time / new tokens), then
   one ``generate`` per side under ``torch.profiler`` (``lookup_us`` = self
   time of the "TorchDynamo Cache Lookup" events / their number: per
   compiled call). Medians over the rounds; ``token_ratio_vs_floor`` is the
   median of the per-round ratios side / floor, with its spread. torch
   serves the floor's guardless entry outside the lookup event
   (run.GUARDLESS_NOTE): its ``lookup_us`` is None.
4. **Tokens.** Every ``generate`` of every side must return the eager
   tokens; ``tokens_identical`` says whether they all did, and the command
   fails (exit 1) when not, or when a side's backend compiled nothing
   (``sides_uncompiled``: transformers did not take its compiled path).
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
from typing import Any

import torch

import guardjit
from guardjit import plugin
from guardjit.bench.corpus import QWEN3_8B_LAYERS, VOCAB, qwen3_config
from guardjit.bench.lookup import profile_lookup_us
from guardjit.bench.options import FLOOR, UNSAFE, option_kwargs
from guardjit.bench.run import GUARDLESS_NOTE, Progress, SideBackend, _ratio_stats

SIDES = ("torch", "guardjit", "unsafe", "floor")
# Fields every side's entry carries (the test checks them).
SIDE_FIELDS = ("token_us", "token_ratio_vs_floor", "lookup_us", "lookup_events_per_generate",
               "graphs", "recompiles", "graphs_in_rounds", "first_generate_s",
               "tokens_identical")


@dataclasses.dataclass
class Settings:
    layers: int = QWEN3_8B_LAYERS
    new_tokens: int = 32
    prompt: int = 8  # prompt tokens (batch 1)
    rounds: int = 7
    backend: str = "eager"
    quick: bool = False

    @classmethod
    def quick_mode(cls) -> Settings:
        return cls(layers=2, new_tokens=8, rounds=3, quick=True)


class CountingBackend(SideBackend):
    """A side's backend (run.SideBackend) that counts the graphs it compiles."""

    def __init__(self, name: str, side: str) -> None:
        super().__init__(name, side)
        self.graphs = 0

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        self.graphs += 1
        return super().__call__(gm, example_inputs)


def build_model(layers: int) -> torch.nn.Module:
    """The corpus's Qwen3 config at ``layers`` layers, cache on, random weights."""
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    return Qwen3ForCausalLM(qwen3_config(layers, use_cache=True)).eval()


def _compile_config() -> Any:
    """The CompileConfig ``generate`` receives: it only makes transformers
    take its compiled path on CPU (``_compile_all_devices``, "useful for
    testing purposes" in transformers); the compiled call itself is the
    side's, put in place by :func:`attach`."""
    from transformers import CompileConfig

    cc = CompileConfig(fullgraph=True)
    cc._compile_all_devices = True
    return cc


def attach(model: torch.nn.Module, side: str, backend: str,
           compile_config: Any) -> tuple[CountingBackend, dict]:
    """Compiles ``model.__call__`` for ``side`` and puts it where transformers
    keeps its own compile (``get_compiled_call`` returns it for this
    ``compile_config``). Returns the side's backend and the
    ``torch._dynamo.config`` patch its compiles run under."""
    counting = CountingBackend(backend, side)
    config: dict = {}
    if side == "torch":
        compiled = torch.compile(model.__call__, backend=counting, fullgraph=True)
    elif side == "guardjit":
        compiled = guardjit.compile(model.__call__, backend=counting, fullgraph=True)
    elif side == "unsafe":
        kwargs, config = option_kwargs(UNSAFE)
        compiled = torch.compile(model.__call__, backend=counting, fullgraph=True, **kwargs)
    elif side == "floor":
        compiled = torch.compile(model.__call__, backend=counting, fullgraph=True,
                                 options={"guard_filter_fn": getattr(torch.compiler, FLOOR)})
    else:
        raise ValueError(f"unknown side {side}")
    model._compiled_call = compiled
    model._last_compile_config = compile_config
    return counting, config


def run(s: Settings, progress: bool = True) -> dict[str, Any]:
    from guardjit.bench.report import run_record

    bar = Progress(2 + len(SIDES) + s.rounds, progress)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the corpus suite (run.run)
    torch._dynamo.reset()
    start = time.perf_counter()
    try:
        with torch.no_grad():
            out = _run(s, bar)
    finally:
        torch.set_num_threads(threads)
        bar.close()
    out.update(run_record(s, start))
    return out


def _run(s: Settings, bar: Progress) -> dict[str, Any]:
    bar(f"build Qwen3 {s.layers} layers, eager reference")
    base = build_model(s.layers)
    ids = torch.randint(0, VOCAB, (1, s.prompt), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    cc = _compile_config()

    def generate(model: torch.nn.Module, compiled: bool) -> torch.Tensor:
        extra = {"compile_config": cc} if compiled else {"disable_compile": True}
        return model.generate(ids, attention_mask=mask, max_new_tokens=s.new_tokens,
                              min_new_tokens=s.new_tokens, do_sample=False,
                              cache_implementation="static", **extra)

    reference = generate(base, False)
    calls: dict[str, Any] = {"eager": lambda: generate(base, False)}
    counters: dict[str, CountingBackend] = {}
    entries: dict[str, dict[str, Any]] = {"eager": {"tokens_identical": True}}
    for side in SIDES:
        bar(f"{side}: compile (first generate)")
        model = copy.deepcopy(base)
        counting, config = attach(model, side, s.backend, cc)
        counters[side] = counting
        begin = time.perf_counter()
        with torch._dynamo.config.patch(**config):
            first = generate(model, True)
        entries[side] = {"first_generate_s": time.perf_counter() - begin,
                         "tokens_identical": torch.equal(first, reference)}
        calls[side] = (lambda m: lambda: generate(m, True))(model)
    plugin.wait_for_tier_up()
    graphs_before = {side: c.graphs for side, c in counters.items()}

    names = list(calls)
    token_us: dict[str, list[float]] = {n: [] for n in names}
    lookup_us: dict[str, list[float | None]] = {n: [] for n in names}
    events: dict[str, list[int]] = {n: [] for n in names}
    for r in range(s.rounds):
        bar(f"round {r + 1}/{s.rounds}")
        for n in names:
            begin = time.perf_counter_ns()
            got = calls[n]()
            token_us[n].append((time.perf_counter_ns() - begin) / 1e3 / s.new_tokens)
            entries[n]["tokens_identical"] &= torch.equal(got, reference)
        for n in names:
            counted: list[int] = []
            total = profile_lookup_us(calls[n], 1, counted)
            events[n].append(counted[0])
            lookup_us[n].append(total / counted[0] if counted[0] else None)

    for n in names:
        e = entries[n]
        lk = [x for x in lookup_us[n] if x is not None]
        e.update({"token_us": statistics.median(token_us[n]),
                  "lookup_us": statistics.median(lk) if lk else None,
                  "lookup_events_per_generate": statistics.median(events[n])})
        if not lk and n != "eager":
            e["lookup_note"] = GUARDLESS_NOTE
        for ref_side, key in (("floor", "token_ratio_vs_floor"), ("torch", "token_ratio_vs_torch")):
            st = _ratio_stats(token_us[n], token_us[ref_side])
            e.update({key: st["ratio"], key + "_min": st["ratio_min"],
                      key + "_max": st["ratio_max"]})
        if n in counters:
            graphs = counters[n].graphs
            e.update({"graphs": graphs, "recompiles": max(0, graphs - 1),
                      "graphs_in_rounds": graphs - graphs_before[n]})
    gj = guardjit.stats()
    identical = all(e["tokens_identical"] for e in entries.values())
    # A side whose backend compiled nothing ran generate() uncompiled (its
    # numbers would be eager's).
    uncompiled = [side for side, c in counters.items() if c.graphs == 0]
    bar("done")
    return {"model": {"name": f"qwen3-{s.layers}L", "layers": s.layers,
                      "new_tokens": s.new_tokens, "prompt_tokens": s.prompt,
                      "backend": s.backend, "cache_implementation": "static"},
            "tokens": reference[0, s.prompt:].tolist(),
            "tokens_identical": identical,
            "sides_uncompiled": uncompiled,
            "sides": entries,
            "guardjit": {"units_seen": gj.get("units_seen"), "units_native": gj.get("units_native"),
                         "guards_total": gj.get("guards_total"),
                         "subtree_skip": {k: (gj.get("subtree_skip") or {}).get(k)
                                          for k in ("units", "units_declined",
                                                    "declined_reasons", "hits")}}}


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def format_text(data: dict[str, Any], markdown: bool = False) -> str:
    from guardjit.bench.report import _table

    m = data["model"]
    head = ("side", "µs per token", "vs floor", "vs torch", "lookup µs per call",
            "lookups per generate", "graphs", "recompiles", "first generate s", "tokens")
    rows = [head]
    for n, e in data["sides"].items():
        spread = (f"{e['token_ratio_vs_floor']:.3f} ({e['token_ratio_vs_floor_min']:.3f}-"
                  f"{e['token_ratio_vs_floor_max']:.3f})")
        rows.append((n, _f(e.get("token_us"), "{:.1f}"), spread,
                     _f(e.get("token_ratio_vs_torch"), "{:.3f}"), _f(e.get("lookup_us")),
                     _f(e.get("lookup_events_per_generate"), "{:g}"),
                     _f(e.get("graphs"), "{}"), _f(e.get("recompiles"), "{}"),
                     _f(e.get("first_generate_s"), "{:.1f}"),
                     "identical" if e["tokens_identical"] else "DIFFER"))
    title = (f"generate(): {m['name']}, {m['prompt_tokens']} prompt + {m['new_tokens']} new "
             f"tokens, greedy, static cache, backend {m['backend']}; medians over "
             f"{data['run']['settings']['rounds']} interleaved rounds")
    tail = ["tokens identical on every side and equal to eager's" if data["tokens_identical"]
            else "TOKENS DIFFER: " + ", ".join(n for n, e in data["sides"].items()
                                                 if not e["tokens_identical"])]
    if data.get("sides_uncompiled"):
        tail.append("NOT COMPILED (generate() ran them eagerly): "
                    + ", ".join(data["sides_uncompiled"]))
    return "\n".join([title, _table(rows, markdown)] + tail)
