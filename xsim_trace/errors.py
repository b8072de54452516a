"""The one exception tree of xsim.

Every error the library raises on purpose derives from :class:`XsimError`.  Errors carry the
context a user needs to find the problem (file, byte offset, rank, node id, field) and render
it in a single line via ``str()``.
"""

from __future__ import annotations


class XsimError(Exception):
    """Base of every deliberate xsim error.

    ``context`` keys are rendered in a fixed order so messages are stable and greppable.
    """

    _ORDER = ("file", "offset", "rank", "node", "field", "event")

    def __init__(self, message: str, **context: object) -> None:
        self.message = message
        self.context = {k: v for k, v in context.items() if v is not None}
        super().__init__(self.__str__())

    def __str__(self) -> str:
        parts = []
        for key in self._ORDER:
            if key in self.context:
                parts.append(f"{key} {self.context[key]}")
        for key, value in self.context.items():
            if key not in self._ORDER:
                parts.append(f"{key} {value}")
        where = ", ".join(parts)
        return f"{where}: {self.message}" if where else self.message


class FormatError(XsimError):
    """A file could not be decoded: truncated, corrupt, or not the expected format."""


class GraphError(XsimError):
    """A graph is structurally invalid: cycles, duplicate ids, dangling dependencies, mismatches."""


class ConfigError(XsimError):
    """A configuration (cluster, plan, model, device catalog) is malformed or inconsistent."""


class BackendError(XsimError):
    """A network backend failed, timed out, or is not available."""


class OutputError(XsimError):
    """An output could not be written (a file where a folder is needed, no space, no permission)."""
