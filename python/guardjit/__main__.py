"""Command line: ``python -m guardjit <subcommand>``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
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
    demo.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    demo.add_argument("--rounds", type=int, default=31, help="timing rounds (default: 31)")
    demo.add_argument("--opt-level", choices=("O0", "light", "O2"), default="light",
                      help="LLVM optimization level of the native checks (default: light)")

    args = parser.parse_args(argv)
    if args.command == "demo":
        from guardjit import demo as demo_mod

        return demo_mod.main(args.models, args.backend, args.json, args.rounds, args.opt_level)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
