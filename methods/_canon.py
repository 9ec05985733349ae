"""Moved to :mod:`harness.vocab` (the canonicalizer is public harness API now): import it from there.

This module only re-exports ``harness.vocab``'s public names, for modules written against the old
place (work in progress on other branches); it goes once nothing imports it.
"""

from harness.vocab import *  # noqa: F401,F403
from harness.vocab import __all__  # noqa: F401
