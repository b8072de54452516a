"""The docs stay true (issue 15): every `xsim ...` / `xsim-convert ...` command shown in README.md and
docs/*.md parses with the real argument parser, and every backend name they use exists."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from xsim_trace.cli.main import build_parser
from xsim_trace.network.registry import known_backends, normalise_name

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_INLINE = re.compile(r"`((?:\$ )?xsim(?:-convert)? [^`]+)`")
_BACKEND = re.compile(r"--backend[ =]([\w|\\-]+)")


def _blocks(text: str) -> list[tuple[str, bool]]:
    """``(command, whole)``: lines of fenced code blocks that start with xsim (after an optional $),
    whole commands; and inline code spans that do, which may be fragments (``xsim generate --plan``)."""
    out: list[tuple[str, bool]] = []
    fenced = False
    pending = ""
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            line = pending + line.strip()
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            line = line.removeprefix("$ ")
            if line.startswith(("xsim ", "xsim-convert ")):
                out.append((line, True))
        else:
            out.extend((m.group(1).removeprefix("$ "), False) for m in _INLINE.finditer(line))
    return out


def _tokens(command: str) -> list[str]:
    """argv for the parser: placeholders made concrete (A|B -> A, [optional] kept, ... dropped)."""
    command = re.split(r"\s+#", command)[0].replace("\\|", "|")
    command = command.replace("[", " ").replace("]", " ")
    words = []
    for word in shlex.split(command):
        word = word.split("|")[0].rstrip(".")
        if re.fullmatch(r"[A-Z][A-Z_]*", word):  # a placeholder value (N, K, FILE): any number will do
            word = "1"
        if word and word not in ("...", "&&"):
            words.append(word)
        if word == "&&":
            break
    if words[0] == "xsim-convert":
        words = ["xsim", "convert", *words[1:]]
    return words[1:]


def _commands() -> list[tuple[str, str, bool]]:
    found = []
    for doc in DOCS:
        for command, whole in _blocks(doc.read_text(encoding="utf-8")):
            found.append((f"{doc.name}: {command}", command, whole))
    return found


def _check_fragment(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """Why the commands and options of a fragment do not exist, or None."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and not word.startswith("-"):
            if word not in subs[0].choices:
                return f"no command {word!r}"
            parser = subs[0].choices[word]
            continue
        if word.startswith("-") and word != "-" and not re.fullmatch(r"-\d.*", word):
            options = {o for a in parser._actions for o in a.option_strings}
            if word.split("=")[0] not in options:
                return f"{parser.prog}: no option {word}"
    return None


COMMANDS = _commands()


def test_docs_show_commands():
    assert len(COMMANDS) > 30


@pytest.mark.parametrize("label,command,whole", COMMANDS, ids=[c[0][:80] for c in COMMANDS])
def test_documented_command_parses(label, command, whole):
    parser = build_parser()
    argv = _tokens(command)
    if not whole or argv[1:2] == ["1"]:  # a fragment in prose, or a synopsis (xsim convert FORMAT ...)
        why = _check_fragment(parser, [w for w in argv if w != "1"])
        assert why is None, f"{label}: {why}"
        return
    if argv[-1:] == ["--help"]:
        return
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"{label}\n  argv {argv}\n  {err.getvalue().strip().splitlines()[-1] if err.getvalue() else exc}")


def test_documented_backend_names_exist():
    known = {normalise_name(b) for b in known_backends()}
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        names = [n for m in _BACKEND.finditer(text) for n in m.group(1).replace("\\|", "|").split("|")]
        names += [n.strip() for m in re.finditer(r"backend: \[([^\]]+)\]", text) for n in m.group(1).split(",")]
        for name in names:
            if name and name.upper() != name:  # skip placeholders such as NAME
                assert normalise_name(name) in known and "_" not in name, f"{doc.name}: unknown backend {name!r}"


def test_docs_and_tools_run_what_the_readme_installs():
    """The README installs with pip into the current environment: no doc or tool usage line may assume a
    `.venv/bin/...` the reader never created."""
    texts = [*DOCS, *sorted((REPO / "tools").glob("*.py")), *sorted((REPO / "traces").rglob("README.md"))]
    offenders = [str(p.relative_to(REPO)) for p in texts if ".venv/bin/" in p.read_text(encoding="utf-8")]
    assert offenders == []


def test_backend_names_are_spelled_as_the_cli_takes_them():
    """`analytical_ca` in prose is the module (analytical_ca.py), never the backend: docs say `analytical-ca`."""
    for doc in DOCS:
        for name in known_backends():
            if "-" not in name:
                continue
            wrong = re.findall(rf"\b{re.escape(name.replace('-', '_'))}\b(?!\.py)", doc.read_text(encoding="utf-8"))
            assert wrong == [], f"{doc.name}: backend spelled {wrong[0]!r}; the CLI name is {name!r}"
