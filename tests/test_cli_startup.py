"""Start-up stays cheap: ``xsim --help`` imports no command module, and no plotting library is
imported unless a plot is written (fresh interpreters, so other tests' imports do not count)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from xsim_trace.cli.main import COMMANDS, build_parser, command_of

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_help_imports_no_command_and_no_plotting():
    got = _python(
        "import contextlib, io, json, sys\n"
        "from xsim_trace.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "mods = [m for m in sys.modules if m.startswith('xsim_trace.cli.') and m != 'xsim_trace.cli.main']\n"
        "print(json.dumps({'mods': mods, 'mpl': 'matplotlib' in sys.modules, 'np': 'numpy' in sys.modules,\n"
        "                  'listed': all(c in out.getvalue() for c in %r)}))" % [c for c, _m, _h in COMMANDS]
    )
    assert got == {"mods": [], "mpl": False, "np": False, "listed": True}


def test_replay_without_plot_imports_no_plotting(tmp_path):
    from xsim_trace.graph import NodeType, Trace, make_metadata, make_node
    from xsim_trace.io import write_rank_set

    traces = {r: Trace(make_metadata(), (make_node(1, "c", NodeType.COMP, duration_micros=5),
                                         make_node(2, "ar", NodeType.COMM_COLL, data_deps=(1,), comm_type=0, comm_size=1 << 20)),
                       rank=r) for r in range(2)}
    write_rank_set(tmp_path / "s", traces)
    code = (
        "import json, sys\n"
        "from xsim_trace.cli.main import main\n"
        f"rc = main(['-q', 'replay', {str(tmp_path / 's')!r}, '--cluster', 'dgx-h100:1', '--no-plot', '--out', {str(tmp_path / 'o')!r}])\n"
        "print(json.dumps({'rc': rc, 'mpl': 'matplotlib' in sys.modules}))"
    )
    assert _python(code) == {"rc": 0, "mpl": False}
    assert (tmp_path / "o" / "summary.json").exists() and not (tmp_path / "o" / "breakdown.png").exists()


def test_lazy_parser_lists_the_help_lines_the_modules_register():
    full = build_parser()
    sub = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    assert [(c.dest, c.help) for c in sub._choices_actions] == [(name, line) for name, _m, line in COMMANDS]


def test_command_of_skips_global_flags():
    assert command_of(["-v", "-q", "replay", "x"]) == "replay"
    assert command_of(["-vv", "trace", "check"]) == "trace"
    assert command_of(["--help"]) is None and command_of([]) is None
    lazy = build_parser("trace", lazy=True)
    args = lazy.parse_args(["trace", "check", "x.et"])
    assert args.command == "trace" and callable(args.func)
