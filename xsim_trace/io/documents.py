"""The boundary of every configuration file (cluster, plan, sweep spec, model spec, device catalog,
comm groups, text workload): read as UTF-8 text and parsed as YAML or JSON, every failure a
:class:`~xsim_trace.errors.ConfigError` (or FormatError) in one line naming the file.

Limits: at most :data:`MAX_CONFIG_BYTES` of text, nesting at most :data:`MAX_CONFIG_DEPTH` levels
(a deeper document is refused before the parsers, which recurse, see it).
"""

from __future__ import annotations

import json
import os
from typing import Any


from xsim_trace.errors import ConfigError, XsimError

#: a configuration file larger than this is not one (64 MiB)
MAX_CONFIG_BYTES = 64 << 20
#: YAML / JSON configurations nest a handful of levels
MAX_CONFIG_DEPTH = 64


def read_text(path: str | os.PathLike[str], what: str, error: type[XsimError] = ConfigError) -> str:
    """The UTF-8 text of ``path``; ``what`` names the file in messages ("cluster file")."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise error(f"cannot read the {what}: no such file", file=name) from None
    except IsADirectoryError:
        raise error(f"cannot read the {what}: it is a directory", file=name) from None
    except OSError as exc:
        raise error(f"cannot read the {what}: {exc.strerror or exc}", file=name) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise error(f"the {what} is larger than {MAX_CONFIG_BYTES >> 20} MiB", file=name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"the {what} is not UTF-8 text (byte 0x{data[exc.start]:02x})", file=name, offset=exc.start) from None


def parse_document(text: str, name: str, *, as_json: bool, what: str = "file",
                   error: type[XsimError] = ConfigError) -> Any:
    """``text`` parsed as JSON (``as_json``) or YAML; errors name the file and the first line of the
    parser's message."""
    kind = "JSON" if as_json else "YAML"
    _check_depth(text, name, error)
    bad_input: tuple[type[BaseException], ...] = (ValueError, OverflowError)  # the parsers' ways of saying it
    if not as_json:
        import yaml  # noqa: PLC0415 - only YAML documents pay for it (~0.03 s of start-up)

        bad_input += (yaml.YAMLError,)
    try:
        return json.loads(text) if as_json else yaml.safe_load(text)
    except bad_input as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise error(f"the {what} is not valid {kind}: {first}", file=name) from None
    except RecursionError:
        raise error(f"the {what} nests too deeply", file=name) from None


def load_document(path: str | os.PathLike[str], what: str, *, as_json: bool | None = None,
                  error: type[XsimError] = ConfigError) -> Any:
    """Read and parse a YAML / JSON configuration file (JSON when the name ends in .json, unless
    ``as_json`` says)."""
    name = os.fspath(path)
    text = read_text(name, what, error)
    json_doc = name.lower().endswith(".json") if as_json is None else as_json
    return parse_document(text, name, as_json=json_doc, what=what, error=error)


def _check_depth(text: str, name: str, error: type[XsimError]) -> None:
    """Refuse flow-style nesting ([[[[... or {a: {a: ...) deeper than MAX_CONFIG_DEPTH; block-style
    YAML nests by indentation, which the parser handles without recursion limits of its own."""
    depth = deepest = 0
    if text.count("[") + text.count("{") <= MAX_CONFIG_DEPTH:
        return
    for ch in text:
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_CONFIG_DEPTH:
                    raise error(f"nested deeper than {MAX_CONFIG_DEPTH} levels", file=name)
        elif ch in "]}":
            depth = max(0, depth - 1)
