"""The ``xsim`` and ``xsim-convert`` command lines.

Only this package touches argv, logging handlers, progress bars and exit codes.  Each command
group lives in its own module exposing ``register(subparsers)``; the module adds its sub-parser
and sets ``func`` (called with the parsed args, returns an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from xsim_trace.errors import XsimError

#: command modules under xsim_trace.cli, in the order they appear in --help
COMMAND_MODULES = (
    "trace",
    "convert",
    "replay",
    "demo",
    "rewrite",
    "plan",
    "generate",
    "estimate",
    "validate",
    "backends",
    "sweep",
)

log = logging.getLogger("xsim")


def _load_commands(subparsers: argparse._SubParsersAction) -> None:
    for name in COMMAND_MODULES:
        module_name = f"xsim_trace.cli.{name}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:  # a command group not built yet
            if exc.name != module_name:
                raise
            continue
        module.register(subparsers)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xsim",
        description="Trace-driven simulator of LLM training iterations on heterogeneous GPU clusters.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors; no progress bars")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _load_commands(sub)
    return parser


def configure_logging(verbose: int, quiet: bool) -> None:
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("xsim: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def run(argv: list[str] | None, parser: argparse.ArgumentParser) -> int:
    args = parser.parse_args(argv)
    configure_logging(args.verbose, args.quiet)
    try:
        return int(args.func(args) or 0)
    except XsimError as exc:
        print(f"xsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("xsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def main(argv: list[str] | None = None) -> int:
    return run(argv, build_parser())


def convert_main(argv: list[str] | None = None) -> int:
    """``xsim-convert ...`` is ``xsim convert ...``."""
    argv = sys.argv[1:] if argv is None else argv
    return main(["convert", *argv])


if __name__ == "__main__":
    raise SystemExit(main())
