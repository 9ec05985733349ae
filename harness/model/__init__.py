"""Model surgery: build the source model, initialize its new embeddings, install them, and describe the result.

``initialize`` (an :class:`~harness.model.initialize.InitRequest` → an initialized model, with the init
cache), ``surgery`` (install a token mapping: input/output rows, MLM bias), ``heads`` (does a
checkpoint hold the head a task needs), ``provenance`` (rows by what the mapping is, random rows by
reason), ``diagnostics`` (gold-alignment diagnostics on the built-in world). The language encodings'
wrapper is public API: :mod:`harness.language_encoding`.
"""
