"""``--device-file YAML``: the run's device catalog, built once at the command's boundary.

Every command that resolves a GPU name (a plan's device groups, a cluster's GPU types, ``--device``,
a trace's ``device_name``) takes the flag and resolves the names in one catalog: the built-in one plus
the user's file (:func:`xsim_trace.devices.catalog_for`).  The resolved DeviceSpecs travel down.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xsim_trace.devices.catalog import Catalog

HELP = ("extra devices (same shape as the built-in catalog, xsim_trace/data/devices.yaml): new devices "
        "(base: H100 derives one) or changed fields of built-in ones; every GPU name of the run resolves in it")


def add_device_file(parser: "argparse.ArgumentParser | argparse._ArgumentGroup", help_text: str = HELP) -> None:
    parser.add_argument("--device-file", metavar="YAML", help=help_text)


def run_catalog(args: argparse.Namespace) -> "Catalog":
    """The catalog the run's names resolve in: built-in plus ``--device-file`` when given."""
    from xsim_trace.devices.catalog import catalog_for

    return catalog_for(getattr(args, "device_file", None))


def resolve_device(args: argparse.Namespace, catalog: "Catalog", flag: str = "--device"):
    """The DeviceSpec of ``--device`` (None when not given); an unknown name lists the known ones."""
    from xsim_trace.errors import ConfigError

    name = getattr(args, flag.lstrip("-").replace("-", "_"), None)
    if not name:
        return None
    try:
        return catalog.get(name)
    except ConfigError as exc:
        raise ConfigError(exc.message, field=flag) from None
