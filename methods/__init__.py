"""Embedding-initialization methods. Every module is imported here so built-ins register eagerly
(never by whether someone imported a module first)."""

from methods import (  # noqa: F401
    clp,
    focus,
    from_scratch,
    hypernet,
    mean_of_pieces,
    multivariate,
    ofa,
    omp,
    original,
    overlap,
    random_mapping,
    random_normal,
    tiktotok,
    transinner,
    vipi,
    wechsel,
)
