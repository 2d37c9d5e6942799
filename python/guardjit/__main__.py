"""Command line: ``python -m guardjit <subcommand>``."""

from __future__ import annotations

import argparse
import sys


def _output_file(path: str) -> str:
    """An argparse type for files written at the end of a run: the run
    stops at once, with argparse's error, when the file could not be
    written then (its folder is missing or not writable)."""
    import os

    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{path} is a directory")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"no such directory: {folder}")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write into {folder}")
    return path


def _positive(text: str) -> int:
    """argparse type: an int >= 1."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _count(text: str) -> int:
    """argparse type: an int >= 0."""
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {n}")
    return n


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `advise [options] -- script.py ARGS`: everything after `--` is the
    # script's, options included.
    script = None
    if argv[:1] == ["advise"] and "--" in argv:
        cut = argv.index("--")
        argv, script = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(
        prog="python -m guardjit",
        description="guardjit: torch.compile guard sets compiled to native code.")
    sub = parser.add_subparsers(dest="command", required=True)

    from guardjit.models import DEFAULT_MODELS

    demo = sub.add_parser(
        "demo", help="compile the built-in models and compare guardjit with Dynamo",
        description="Compiles the built-in default models with guardjit, times Dynamo's guard "
                    "check against guardjit's on the same frame locals (interleaved medians) "
                    "and replays mutated inputs, counting answers that differ from Dynamo's.")
    demo.add_argument("--models", nargs="+", choices=sorted(DEFAULT_MODELS),
                      default=list(DEFAULT_MODELS), help="models to run (default: all)")
    demo.add_argument("--backend", default="eager",
                      help="torch.compile backend (default: eager; guards are the same)")
    demo.add_argument("--json", metavar="FILE", type=_output_file, help="also write the results as JSON")
    demo.add_argument("--rounds", type=int, default=31, help="timing rounds (default: 31)")
    demo.add_argument("--opt-level", choices=("O0", "light", "O1", "O2"), default="O0",
                      help="level of the first native code, before the background tier-up "
                           "to O1 (default: O0)")

    bench = sub.add_parser(
        "bench", help="benchmark guardjit against Dynamo on a corpus of real models",
        description="--suite corpus (default): per model, in one process and interleaved: "
                    "guard count, Dynamo's and guardjit's check, the TorchDynamo Cache Lookup "
                    "profiler event, the end-to-end call, JIT compile ms, and the same with "
                    "each of torch's guard options (filters, install_free_tensors, dict tags, "
                    "skip_guard_eval_unsafe); see docs/performance.md. --suite diffsets: "
                    "warm-up scenarios run in fresh processes for plain torch and each "
                    "guardjit differentiating-set policy; guards of the differentiating "
                    "roots, cache lookup under skip_guard_eval_unsafe, and whether every "
                    "warmed input is routed to the entry a full lookup picks; see "
                    "docs/performance.md (differentiating sets). --suite generate: a "
                    "transformers generate() decode loop with a static cache, per token and "
                    "per lookup, plain torch vs guardjit vs torch's unsafe options vs no "
                    "guards, tokens checked against eager.")
    from guardjit.bench.corpus import CORPUS
    from guardjit.bench.diffsets import CONFIGS
    from guardjit.bench.scenarios import SCENARIOS

    bench.add_argument("--suite",
                       choices=("corpus", "diffsets", "memory", "latency", "generate", "serve"),
                       default="corpus",
                       help="what to benchmark (default: corpus); memory: resident memory "
                            "over compile/evict cycles through torch, guardjit against plain "
                            "torch in fresh processes, and the import cost; latency: the "
                            "first call against plain torch and the time until native code "
                            "is in place, per --models; generate: greedy generate() with a "
                            "static cache on a Qwen3 model, per-token time and lookup per side; "
                            "serve: a Python server of AOTInductor packages (a tiny model's "
                            "serve bundle), choosing the package by Dynamo's or guardjit's "
                            "checks: ns per request and requests per second")
    bench.add_argument("--units", type=int, default=1000,
                       help="memory: compile units (default: 1000, --quick: 200)")
    bench.add_argument("--layers", type=int, default=None,
                       help="generate: the Qwen3 model's layers (default: 36, --quick: 2)")
    bench.add_argument("--new-tokens", type=int, default=None,
                       help="generate: tokens generated per call (default: 32, --quick: 8)")
    bench.add_argument("--models", nargs="+", choices=list(CORPUS), default=list(CORPUS),
                       help="corpus: models to run (default: all)")
    bench.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS),
                       default=list(SCENARIOS), help="diffsets: scenarios (default: all)")
    bench.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS),
                       help="diffsets: configurations (default: all four)")
    bench.add_argument("--repeats", type=int, default=None,
                       help="diffsets: processes per scenario and configuration, interleaved; "
                            "lookup µs is their median (default: 3, --quick: 1)")
    bench.add_argument("--report", metavar="FILE.md", type=_output_file,
                       help="diffsets: write the Markdown report (table, rule, findings)")
    bench.add_argument("--json", metavar="FILE", type=_output_file, help="write the results as JSON")
    bench.add_argument("--plot", metavar="FILE.png", type=_output_file, help="write the plot (needs matplotlib)")
    bench.add_argument("--quick", action="store_true",
                       help="smaller models, few rounds and orders, eager end to end (CI)")
    bench.add_argument("--backend", default=None,
                       help="backend of the end-to-end and cache-lookup runs (default: eager; "
                            "e.g. inductor); guard checks always use eager")
    bench.add_argument("--core", action="store_true",
                       help="only the default check, lookup, end to end and torch's unsafe "
                            "options beside them (no other option, no passes): for "
                            "before/after pairs")
    bench.add_argument("--bundle-dir", metavar="DIR",
                       help="serve: write the bundle here (default: a temporary directory)")
    bench.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")

    export = sub.add_parser(
        "export", help="write the Guard IR (.gir) of every compile unit of a model",
        description="Compiles the model a factory returns with guardjit, calls it once and "
                    "writes one .gir file per compile unit (no addresses, object ids or "
                    "install paths: see guardjit/stable_text.py). --corpus writes the "
                    "models of tests/corpus instead (scripts/regen-corpus.sh). --serve writes "
                    "a bundle for C++ serving hosts (docs/serving.md): per bucket an "
                    "AOTInductor package and the portable guard set of its compile unit, "
                    "select sets that tell the buckets apart, and manifest.json.")
    export.add_argument("factory", metavar="MODULE:FACTORY", nargs="?",
                        help="a callable returning a guardjit.models.ModelCase, a "
                             "guardjit.bench.corpus.BenchCase or (model, example_args), "
                             "e.g. guardjit.models:transformer")
    from guardjit.export import CORPUS as GIR_CORPUS

    export.add_argument("--corpus", nargs="+", metavar="NAME",
                        choices=["all"] + list(GIR_CORPUS),
                        help="export these corpus entries (or all) instead of a factory: "
                             + ", ".join(GIR_CORPUS))
    export.add_argument("--serve", metavar="MODULE:FACTORY",
                        help="write a serve bundle (guardjit-serve/1) of the model a factory "
                             "returns: a guardjit.serving.ServeCase (its buckets) or anything "
                             "MODULE:FACTORY takes (its example call), e.g. "
                             "guardjit.serving:tiny")
    export.add_argument("--bucket", action="append", metavar="SPEC",
                        help="--serve: one bucket derived from the factory's first example, "
                             "batch=N,dtype=D,model_dtype=D,name=S (each optional): dim 0 of "
                             "every tensor input becomes N, floating inputs become dtype D, "
                             "model_dtype=D serves a copy of the model in D; repeat for "
                             "more buckets (default: the factory's buckets)")
    export.add_argument("--json", metavar="FILE",
                        help="--serve: also write a summary as JSON (- for stdout, instead "
                             "of the manifest's path)")
    export.add_argument("--no-progress", action="store_true",
                        help="--serve: no progress lines on stderr")
    export.add_argument("--out", required=True, metavar="DIR", help="output directory")
    export.add_argument("--backend", default="eager", help="torch.compile backend")
    export.add_argument("--quick", action="store_true",
                        help="call the factory with quick=True (bench corpus factories)")
    export.add_argument("--dynamic", action="store_true",
                        help="torch.compile(dynamic=True): symbolic shapes")
    export.add_argument("--install-free-tensors", action="store_true",
                        help="torch._dynamo.config.install_free_tensors=True")
    export.add_argument("--name", help="file name stem (default: the factory's model name)")
    export.add_argument("--no-version-header", action="store_true",
                        help="omit the `gir torch=.. guardjit=..` first line (the corpus does)")

    fuzz = sub.add_parser(
        "fuzz", help="mutation fuzzer: Dynamo's check vs guardjit's interpreter and JIT",
        description="Mutates the frame locals and program state of compiled corpus models and "
                    "generated programs (under each plugin option) and compares Dynamo's root "
                    "check with guardjit's interpreter, native check and installed root; a "
                    "sample runs end to end against eager; under skip_guard_eval_unsafe, "
                    "warmed inputs must be routed as a full lookup would. Disagreements are "
                    "minimized and saved as reproducers; see docs/fuzzing.md.")
    from guardjit.fuzz import targets as fuzz_targets

    fuzz.add_argument("--cases", type=int, default=10000, help="cases to run (default: 10000)")
    fuzz.add_argument("--seed", type=int, default=0, help="seed of the whole run (default: 0)")
    fuzz.add_argument("--models", nargs="*", choices=list(fuzz_targets.CORPUS_MODELS),
                      default=None, help="corpus models (default: all; none: programs only)")
    fuzz.add_argument("--options", nargs="+", choices=list(fuzz_targets.OPTIONS),
                      default=None, help="plugin options per target (default: all)")
    fuzz.add_argument("--programs", type=int, default=20,
                      help="generated programs (check level; default: 20)")
    fuzz.add_argument("--stance-programs", type=int, default=3,
                      help="generated programs per stance policy (default: 3)")
    fuzz.add_argument("--stance-share", type=float, default=0.03,
                      help="fraction of the cases run under the stance (default: 0.03)")
    fuzz.add_argument("--e2e-every", type=int, default=97,
                      help="run every N-th eligible case end to end (0: never; default: 97)")
    fuzz.add_argument("--out", default="fuzz-reproducers", metavar="DIR",
                      help="where disagreements are saved (default: fuzz-reproducers)")
    fuzz.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                      help="stop starting new cases after this long")
    fuzz.add_argument("--tier-swaps", action="store_true",
                      help="also ask, per unit, a fresh interpreter-first callable every "
                           "--swap-batch cases while light then O1 code is swapped in "
                           "(docs/fuzzing.md)")
    fuzz.add_argument("--swap-batch", type=int, default=8, metavar="N",
                      help="cases a swapping callable serves at least, and until it reached O1, "
                           "before a fresh one (default: 8)")
    fuzz.add_argument("--json", metavar="FILE", type=_output_file, help="also write the summary as JSON")
    fuzz.add_argument("--replay", metavar="FILE.py", help="replay a saved reproducer and exit")
    fuzz.add_argument("--no-progress", action="store_true", help="no progress bar")

    advise = sub.add_parser(
        "advise", help="torch's guard-overhead guide as one command, for one model",
        usage="python -m guardjit advise [options] MODULE:FACTORY\n"
              "       python -m guardjit advise [options] -- script.py [ARGS ...]\n"
              "       python -m guardjit advise --from-json FILE [--html FILE] [--plot FILE]",
        epilog="-- script.py ARGS runs the script as python script.py ARGS would, with every "
               "torch.compile, nn.Module.compile and guardjit.compile observed, then advises "
               "on each compiled module or function with the inputs of its calls, the "
               "most-called first (--targets); --json then writes guardjit-advise-script/1.",
        description="Compiles the model a factory returns with plain torch.compile, each "
                    "option of torch's guide to guard overhead and guardjit; measures the "
                    "cache lookup, guard check and whole call of each, interleaved in one "
                    "process; shows where the guard time goes (guards by source subtree "
                    "and kind, measured native time of the largest groups, per layer) and, "
                    "for each unsafe filter, install_free_tensors, dict tags and the "
                    "skip_guard_eval_unsafe stance, whether it serves a stale graph on "
                    "changes of the model's state drawn from the fuzzer, shown against "
                    "eager. See docs/advise.md.")
    advise.add_argument("factory", metavar="MODULE:FACTORY", nargs="?",
                        help="a callable returning a guardjit.models.ModelCase, a "
                             "guardjit.bench.corpus.BenchCase or (model, example_args), "
                             "e.g. guardjit.models:cnn; or, instead, -- script.py ARGS: runs "
                             "the script (everything after -- is its) and advises on what "
                             "it compiled")
    advise.add_argument("--targets", type=int, metavar="N",
                        help="-- script.py: advise on the N most-called compiled targets "
                             "(default: 3; 0: all)")
    advise.add_argument("--json", metavar="FILE",
                        help="also write the report as JSON (- for stdout)")
    advise.add_argument("--backend", default="eager",
                        help="torch.compile backend (default: eager; guards are the same)")
    advise.add_argument("--quick", action="store_true",
                        help="fewer rounds, groups and changes; quick=True to bench factories")
    advise.add_argument("--depth", type=_positive, metavar="N",
                        help="source steps below the frame local that name a group (default: 2)")
    advise.add_argument("--groups", type=_count, metavar="N",
                        help="largest groups whose native time is measured, one compile each "
                             "(default: 5; 3 with --quick)")
    advise.add_argument("--changes", type=_count, metavar="N",
                        help="changes of the model's state tried (default: 16; 8 with --quick; "
                             "more reach deeper attributes, e.g. a config's)")
    advise.add_argument("--rounds", type=_positive, metavar="N",
                        help="interleaved rounds (default: 7; 3 with --quick)")
    advise.add_argument("--no-progress", action="store_true", help="no progress bar")
    advise.add_argument("--html", metavar="FILE.html", type=_output_file,
                        help="also write the report as one self-contained HTML page, with the "
                             "plot")
    advise.add_argument("--plot", metavar="FILE.png", type=_output_file,
                        help="also write the plot: per-call µs per side, measured group costs, "
                             "guards per layer (.png, .svg or .pdf; needs matplotlib)")
    advise.add_argument("--from-json", metavar="FILE",
                        help="measure nothing: print, --html and --plot a report saved with "
                             "--json")

    args = parser.parse_args(argv)
    if args.command == "advise":
        from guardjit import advise as advise_mod
        from guardjit import advise_report

        given = [args.factory is not None, args.from_json is not None, script is not None]
        if sum(given) != 1:
            advise.error("give MODULE:FACTORY or --from-json FILE or -- script.py ARGS (one "
                         "of them)")
        if script == []:
            advise.error("-- must be followed by the script to run")
        if args.from_json is not None and (args.json or args.quick or args.backend != "eager"
                                           or any(getattr(args, k) is not None for k in
                                                  ("depth", "groups", "changes", "rounds"))):
            advise.error("--from-json renders a saved report: --json and the measuring "
                         "options do not apply")
        if args.plot and args.plot.rpartition(".")[2].lower() not in ("png", "svg", "pdf"):
            advise.error("argument --plot: the file's extension picks the format: .png, .svg "
                         "or .pdf")
        if args.json and args.json != "-":
            try:
                _output_file(args.json)
            except argparse.ArgumentTypeError as e:
                advise.error(f"argument --json: {e}")
        if args.from_json is not None:
            return advise_report.from_json_main(args)
        if script is not None:
            from guardjit import advise_script

            args.script = script
            return advise_script.main(args, advise_report.render)
        return advise_mod.main(args, lambda report: advise_report.render(report, args))
    if args.command == "fuzz":
        from guardjit.fuzz import driver

        return driver.main(args)
    if args.command == "export":
        from guardjit import export as export_mod

        given = [args.factory is not None, args.corpus is not None, args.serve is not None]
        if sum(given) != 1:
            export.error("give one of MODULE:FACTORY, --corpus or --serve MODULE:FACTORY")
        if args.serve is None and (args.bucket or args.json):
            export.error("--bucket and --json go with --serve")
        if args.serve is not None and (args.dynamic or args.install_free_tensors
                                       or args.backend != "eager" or args.no_version_header):
            export.error("--serve compiles with static shapes and writes version headers: "
                         "--dynamic, --install-free-tensors, --backend and "
                         "--no-version-header do not apply")
        if args.json and args.json != "-":
            try:
                _output_file(args.json)
            except argparse.ArgumentTypeError as e:
                export.error(f"argument --json: {e}")
        if args.serve is not None:
            return export_mod.serve_main(args.serve, args.out, args.bucket, name=args.name,
                                         quick=args.quick, json_path=args.json,
                                         progress=not args.no_progress)
        return export_mod.main(args.factory, args.out, args.backend, args.corpus,
                               name=args.name, quick=args.quick,
                               dynamic=True if args.dynamic else None,
                               install_free_tensors=args.install_free_tensors,
                               header=not args.no_version_header)
    if args.command == "bench":
        return _bench(args)
    if args.command == "demo":
        from guardjit.lab import demo as demo_mod

        return demo_mod.main(args.models, args.backend, args.json, args.rounds, args.opt_level)
    parser.error(f"unknown command {args.command}")
    return 2


def _bench(args: argparse.Namespace) -> int:
    import guardjit

    if not guardjit.enabled():
        print("guardjit cannot run here (see the warning above)", file=sys.stderr)
        return 2
    if args.suite == "diffsets":
        return _bench_diffsets(args)
    if args.suite == "memory":
        return _bench_memory(args)
    if args.suite == "latency":
        return _bench_latency(args)
    if args.suite == "generate":
        return _bench_generate(args)
    if args.suite == "serve":
        return _bench_serve(args)
    from guardjit.bench import report, run

    settings = run.Settings.quick_mode() if args.quick else run.Settings()
    if args.backend:
        settings.e2e_backend = args.backend
    settings.core = args.core
    data = run.run(args.models, settings, progress=not args.no_progress)
    if args.markdown:
        print(report.main_table(data, markdown=True))
        print()
        print(report.options_table(data, markdown=True))
        print()
        print(report.skip_table(data, markdown=True))
    else:
        print(report.format_text(data))
    if args.json:
        report.write_json(data, args.json)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.plot:
        report.plot(data, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def _report(text: str, data: dict, json_path: str | None) -> int:
    """Prints a suite's table and writes its JSON (the memory and latency
    suites)."""
    import json

    print(text)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(data, f, indent=1)
        print(f"wrote {json_path}", file=sys.stderr)
    return 0


def _bench_memory(args: argparse.Namespace) -> int:
    from guardjit.bench import memory

    units = 200 if args.quick and args.units == 1000 else args.units
    data = memory.run(units=units)
    return _report(memory.format_text(data), data, args.json)


def _bench_latency(args: argparse.Namespace) -> int:
    from guardjit.bench import latency

    data = latency.run(args.models, quick=args.quick, repeats=args.repeats or 3,
                       progress=not args.no_progress)
    return _report(latency.format_text(data), data, args.json)


def _bench_serve(args: argparse.Namespace) -> int:
    from guardjit.bench import serve

    s = serve.Settings.quick_mode() if args.quick else serve.Settings()
    s.out = args.bundle_dir
    data = serve.run(s, progress=not args.no_progress)
    return _report(serve.format_text(data), data, args.json)


def _bench_generate(args: argparse.Namespace) -> int:
    from guardjit.bench import generate

    s = generate.Settings.quick_mode() if args.quick else generate.Settings()
    if args.backend:
        s.backend = args.backend
    if args.layers is not None:
        s.layers = args.layers
    if args.new_tokens is not None:
        s.new_tokens = args.new_tokens
    data = generate.run(s, progress=not args.no_progress)
    _report(generate.format_text(data, markdown=args.markdown), data, args.json)
    if not data["tokens_identical"]:
        print("error: the compiled sides did not all generate eager's tokens (see the table)",
              file=sys.stderr)
        return 1
    if data["sides_uncompiled"]:
        print("error: generate() did not run the compiled call of "
              + ", ".join(data["sides_uncompiled"]), file=sys.stderr)
        return 1
    return 0


def _bench_diffsets(args: argparse.Namespace) -> int:
    from guardjit.bench import diffsets, diffsets_report

    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    data = diffsets.run(args.scenarios, args.configs, quick=args.quick,
                        progress=not args.no_progress, repeats=max(1, repeats))
    print(diffsets_report.table(data, markdown=True) if args.markdown
          else diffsets_report.format_text(data))
    if args.json:
        diffsets.write_json(data, args.json)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.report:
        diffsets_report.write_report(data, args.report, args.json)
        print(f"wrote {args.report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
