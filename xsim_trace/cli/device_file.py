"""``--device-file YAML``: the run's device catalog, built once at the command's boundary.

Every command that resolves a GPU name (a plan's device groups, a cluster's GPU types, ``--device``,
a trace's ``device_name``) takes the flag and resolves the names in one catalog: the built-in one plus
the user's file (:func:`xsim_trace.devices.catalog_for`).  The resolved DeviceSpecs travel down.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from xsim_trace.devices.catalog import Catalog

HELP = ("extra devices (same shape as the built-in catalog, xsim_trace/data/devices.yaml): new devices "
        "(base: H100 derives one) or changed fields of built-in ones; every GPU name of the run resolves in it")


def add_device_file(parser: "argparse.ArgumentParser | argparse._ArgumentGroup", help_text: str = HELP) -> None:
    parser.add_argument("--device-file", metavar="YAML", help=help_text)


class DeviceFileArgs(Protocol):
    """The parsed options of a command that took :func:`add_device_file`."""

    device_file: str | None


def run_catalog(args: DeviceFileArgs) -> "Catalog":
    """The catalog the run's names resolve in: built-in plus ``--device-file`` when given."""
    from xsim_trace.devices.catalog import catalog_for

    return catalog_for(args.device_file)


def resolve_device(name: str | None, catalog: "Catalog", flag: str = "--device"):
    """The DeviceSpec of ``name``, the value of ``flag`` (None when not given); an unknown name lists
    the known ones, naming the flag."""
    from xsim_trace.errors import ConfigError

    if not name:
        return None
    try:
        return catalog.get(name)
    except ConfigError as exc:
        raise ConfigError(exc.message, field=flag) from None
