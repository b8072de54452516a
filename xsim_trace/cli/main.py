"""The ``xsim`` and ``xsim-convert`` command lines.

Only this package touches argv, logging handlers, progress bars and exit codes.  Each command
group lives in its own module exposing ``register(subparsers)``; the module adds its sub-parser
and sets ``func`` (called with the parsed args, returns an exit code).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import sys
import traceback
from typing import Callable, Iterator

from xsim_trace.errors import XsimError

#: (command, module under xsim_trace.cli, its --help line), in the order they appear in --help.  Only
#: the module of the command being run is imported (``xsim --help`` imports none): start-up stays
#: cheap and no command pulls in another's libraries.  tests/test_cli_startup.py checks that each
#: line equals the one the module registers.
COMMANDS = (
    ("trace", "trace", "inspect Chakra .et files: dump, stats, check"),
    ("convert", "convert", "convert Kineto / PyTorch ET / text workloads to Chakra .et rank sets"),
    ("replay", "replay", "replay a multi-rank Chakra trace on a cluster and report the iteration time"),
    ("demo", "demo", "replay the bundled sample on a preset cluster and show the report"),
    ("rewrite", "rewrite", "rewrite a trace or a model for a heterogeneous deployment plan"),
    ("plan", "plan", "deployment plans: check, partition, compare, search"),
    ("generate", "generate", "generate per-rank Chakra (or SimAI text) workloads from a model and parallelism flags"),
    ("estimate", "estimate", "predict one configuration's step time, breakdown, MFU and memory (no rank files)"),
    ("validate", "validate", "convert Kineto captures, replay them, compare per rank with the measured ProfilerStep"),
    ("backends", "backends", "list network backends; compare them on one workload"),
    ("sweep", "sweep", "run a parameter sweep from a YAML spec (resumable results.jsonl, summary of the best runs)"),
    ("collectives", "collectives", "NCCL collective cost model: predict nccl-tests tables"),
    ("calibrate", "calibrate", "fit the network model to measurements"),
)
COMMAND_MODULES = tuple(module for _name, module, _help in COMMANDS)
_GLOBAL_FLAGS = ("-v", "--verbose", "-q", "--quiet")

log = logging.getLogger("xsim")

#: exit codes of both entry points (documented in the README)
EXIT_OK = 0
EXIT_PROBLEMS = 1  # the command ran and found problems (``xsim trace check``)
EXIT_BAD_INPUT = 2  # bad input or usage: one line naming file, rank, node or field
EXIT_INTERNAL = 3  # a bug in xsim: "please report", the traceback under -v
EXIT_INTERRUPTED = 130


def command_of(argv: list[str] | None) -> str | None:
    """The command named on a command line (the first word after the global flags), if any."""
    for arg in sys.argv[1:] if argv is None else argv:
        if arg in _GLOBAL_FLAGS or (arg.startswith("-") and not arg.startswith("--") and set(arg[1:]) <= {"v", "q"}):
            continue
        return None if arg.startswith("-") else arg
    return None


def _load_commands(subparsers: argparse._SubParsersAction, load: Callable[[str], bool]) -> None:
    """Register every command: the module's full parser where ``load(name)``, a one-line
    placeholder (name and help) for the rest."""
    for name, module_name, help_line in COMMANDS:
        if not load(name):
            subparsers.add_parser(name, help=help_line, add_help=False)
            continue
        importlib.import_module(f"xsim_trace.cli.{module_name}").register(subparsers)


def build_parser(command: str | None = None, *, lazy: bool = False) -> argparse.ArgumentParser:
    """The ``xsim`` parser.  ``lazy``: only ``command``'s module is imported and fully registered
    (``xsim --help`` imports none); otherwise every command's."""
    parser = argparse.ArgumentParser(
        prog="xsim",
        description="Trace-driven simulator of LLM training iterations on heterogeneous GPU clusters.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors; no progress bars")
    # -v / -q after the command name land here (only when given: the sub-parsers' default is SUPPRESS)
    parser.set_defaults(sub_verbose=0, sub_quiet=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _load_commands(sub, (lambda name: name == command) if lazy else (lambda name: True))
    _add_global_flags(sub)
    return parser


def _add_global_flags(sub: argparse._SubParsersAction) -> None:
    """-v / -q also after a command name (``xsim replay -q ...``, ``xsim-convert -q kineto ...``).

    Every sub-parser, nested ones included, gets them under their own names; :func:`_global_flags`
    adds them to the top-level ones."""
    for parser in {id(p): p for p in sub.choices.values()}.values():
        parser.add_argument("-v", "--verbose", dest="sub_verbose", action="count", default=argparse.SUPPRESS,
                            help="more log output (-vv for debug)")
        parser.add_argument("-q", "--quiet", dest="sub_quiet", action="store_true", default=argparse.SUPPRESS,
                            help="only errors; no progress bars")
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_global_flags(action)


def _global_flags(args: argparse.Namespace) -> None:
    args.verbose = int(args.verbose) + int(args.sub_verbose)
    args.quiet = bool(args.quiet or args.sub_quiet)


def configure_logging(verbose: int, quiet: bool) -> None:
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("xsim: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def run(argv: list[str] | None, parser: argparse.ArgumentParser) -> int:
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    _global_flags(args)
    configure_logging(args.verbose, args.quiet)
    try:
        with _no_scipy_probe():
            return int(args.func(args) or 0)
    except XsimError as exc:
        print(f"xsim: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("xsim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the one place that turns a bug into exit 3
        return _internal_error(exc, args.verbose)


@contextlib.contextmanager
def _no_scipy_probe() -> Iterator[None]:
    """numba probes for scipy's BLAS the first time it loads a kernel, importing scipy.linalg (~0.3 s
    of CPU where scipy is installed; it is no xsim dependency).  xsim uses neither scipy nor numba's
    linear algebra, so while a command runs ``import scipy`` fails fast (numba then leaves its BLAS
    support off); not where scipy was imported already."""
    if "scipy" in sys.modules:
        yield
        return
    sys.modules["scipy"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if "scipy" in sys.modules and sys.modules["scipy"] is None:
            del sys.modules["scipy"]


def _internal_error(exc: BaseException, verbose: int) -> int:
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
    print(f"xsim: internal error: {type(exc).__name__}: {exc}{at}; this is a bug in xsim, please report it "
          f"with the command line{'' if verbose else ' and the traceback shown by -v'}", file=sys.stderr)
    if verbose:
        traceback.print_exception(exc, file=sys.stderr)
    return EXIT_INTERNAL


def main(argv: list[str] | None = None) -> int:
    # a command makes many long-lived objects (modules, numba's typing registries, decoded rank sets)
    # and few cycles: with the default thresholds a 1,024-rank replay runs ~300 collections, 0.1-0.2 s
    # of CPU; far fewer for the command's duration
    thresholds = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    try:
        return run(argv, build_parser(command_of(argv), lazy=True))
    finally:
        gc.set_threshold(*thresholds)


def convert_main(argv: list[str] | None = None) -> int:
    """``xsim-convert ...`` is ``xsim convert ...``."""
    argv = sys.argv[1:] if argv is None else argv
    return main(["convert", *argv])


if __name__ == "__main__":
    raise SystemExit(main())
