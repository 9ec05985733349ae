"""The front door: the ``tokxfer`` command line (argument parsing, the commands, error reporting).

The only room that wires the others together; nothing imports it. ``python -m harness.cli`` is what
the ``tokxfer`` script runs.
"""

from harness.cli.main import CONFIG_DIR, PACKAGE_DIR, build_parser, main

__all__ = ["CONFIG_DIR", "PACKAGE_DIR", "build_parser", "main"]
