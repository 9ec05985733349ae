"""Language encodings. Every module is imported here so that built-ins register eagerly."""

from methods.encodings import additive, attached, langsamp, none, xlp, xlp_shared  # noqa: F401
