"""Task adapters and adaptation stages. Every module is imported here so built-ins register eagerly."""

from tasks import mlm_at_init, ner, qa, xnli  # noqa: F401
