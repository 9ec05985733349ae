"""Task adapters and adaptation stages. Every module is imported here so built-ins register eagerly."""

from tasks import iwslt, lapt, mlm_at_init, ner, perplexity, qa, xnli  # noqa: F401
