"""The built-in world: an offline, deterministic, controllable transfer testbed (see WORLD.md).

A generated source language ``src`` and target languages derived from it (``near``, ``far``,
``script``, ``agglu``), with text, task data in the formats of the real data sets, and gold dictionaries,
parallel corpora and word maps.

Example:
    >>> import tempfile
    >>> from harness.world import World, build_world
    >>> world = World(build_world("tiny", seed=0, root=tempfile.mkdtemp()))
    >>> world.source_language, world.targets
    ('src', ['near', 'far', 'script', 'agglu'])
"""

from .build import build_world, default_root
from .config import AGGLU, FAR, GENERATOR_VERSION, NEAR, SCRIPT, SIZES, SOURCE, LanguageSpec, WorldConfig, world_config
from .world import World

__all__ = [
    "AGGLU",
    "FAR",
    "GENERATOR_VERSION",
    "NEAR",
    "SCRIPT",
    "SIZES",
    "SOURCE",
    "LanguageSpec",
    "World",
    "WorldConfig",
    "build_world",
    "default_root",
    "world_config",
]
