"""Task adapters and adaptation stages. Every module is imported here so built-ins register eagerly."""

from tasks import bitext_retrieval, distill, iwslt, lapt, mlm_at_init, ner, perplexity, qa, teacher_agreement, xnli  # noqa: F401
