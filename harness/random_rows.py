"""Random embedding rows: the distributions of :class:`harness.protocols.RandomRows`.

The harness draws a mapping's FALLBACK rows here (:func:`draw`, called by
:func:`harness.model.surgery.materialize`), each matrix from its own rows' statistics:

* ``diagonal`` — N(mean, std) per dimension (every method's fallback; METHODS.md "Baselines");
* ``full`` — N(mu, s * Sigma), mu and Sigma the mean and covariance (divided by n) of the rows
  (Hewitt 2021), computed in float64 in row chunks (a 250k x d matrix is never copied whole).
  Sigma is factored by Cholesky; a singular Sigma (fewer rows than dimensions, collinear rows) is
  factored through its eigendecomposition instead, which samples the *same* distribution (rows in
  Sigma's range) — not a fallback;
* ``transformers`` — ``resize_token_embeddings(mean_resizing=True)`` of transformers 5
  (``_init_added_embeddings_weights_with_mean``): float32 statistics, torch's
  ``constraints.positive_definite`` check of s * Sigma, then N(mu, s * Sigma) through its Cholesky
  factor, or every row mu when the check fails. Only the random stream differs (transformers draws
  from torch's global generator; here the trial's generator).

:func:`covariance_factor` is public so that a method can report, before the harness draws, which
of these happens for its source (``multivariate`` records it in its info).

Example:
    >>> import torch
    >>> from harness.protocols import RandomRows
    >>> E = torch.randn(500, 4, generator=torch.Generator().manual_seed(0))
    >>> rows = draw(E, 3, torch.Generator().manual_seed(1), RandomRows("full"))
    >>> tuple(rows.shape), covariance_factor(E, RandomRows("full")).how
    ((3, 4), 'cholesky')
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from harness.cache import ProcessMemo
from harness.protocols import RandomRows

__all__ = ["Factor", "moments", "covariance_factor", "draw", "content_key"]

CHUNK_ELEMENTS = 1 << 24
"""Matrix elements per chunk when accumulating the covariance (128 MiB of float64)."""


def moments(matrix: torch.Tensor, *, dtype: torch.dtype = torch.float64,
            chunk_elements: int = CHUNK_ELEMENTS) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and covariance (divided by the number of rows) of a matrix's rows, in row chunks.

    Two passes (the mean first, then the centered cross-products), so no cancellation; memory is one
    chunk plus the ``d x d`` result.

    Args:
        matrix: ``n x d`` rows (any float dtype, any device; read chunk by chunk on the CPU).
        dtype: accumulation and result dtype (``torch.float32`` reproduces transformers' numbers).
        chunk_elements: elements of ``matrix`` converted at once.

    Returns:
        ``(mean [d], covariance [d, d])`` in ``dtype``.

    Example:
        >>> m, c = moments(torch.tensor([[0.0, 0.0], [2.0, 4.0]]))
        >>> m.tolist(), c.tolist()
        ([1.0, 2.0], [[1.0, 2.0], [2.0, 4.0]])
    """
    n, d = matrix.shape
    if n == 0:
        raise ValueError("moments of a matrix with no rows")
    step = max(1, chunk_elements // max(d, 1))
    total = torch.zeros(d, dtype=dtype)
    for a in range(0, n, step):
        total += matrix[a : a + step].detach().to("cpu", dtype).sum(0)
    mean = total / n
    cov = torch.zeros(d, d, dtype=dtype)
    for a in range(0, n, step):
        c = matrix[a : a + step].detach().to("cpu", dtype) - mean
        cov += c.T @ c
    cov /= n
    return mean, (cov + cov.T) / 2  # exactly symmetric (the product is, up to summation order)


@dataclass
class Factor:
    """A way to sample N(mean, covariance): ``mean + z @ root.T`` with ``z ~ N(0, I)``.

    Attributes:
        mean: ``[d]``.
        root: ``d x d`` with ``root @ root.T`` the (scaled) covariance, or ``None``: every row is ``mean``.
        how: ``"cholesky"``, ``"eigh"`` (singular covariance, sampled in its range) or ``"mean"``
            (transformers: the positive-definiteness check failed).
    """

    mean: torch.Tensor
    root: torch.Tensor | None
    how: str


_FACTOR_MEMO = ProcessMemo(2)


def content_key(matrix: torch.Tensor) -> tuple:
    """``(dtype, shape, sha256 of the bytes)`` of a tensor: a per-process memo key for what is derived from a
    matrix's content (every trial of a grid gets its own copy of the same source rows). ~0.3 s for e5's
    250k x 384 float32 rows.

    Example:
        >>> content_key(torch.zeros(2, 3)) == content_key(torch.zeros(2, 3)), content_key(torch.zeros(3, 2))[1]
        (True, (3, 2))
    """
    flat = matrix.detach().to("cpu").contiguous()
    return str(flat.dtype), tuple(flat.shape), hashlib.sha256(memoryview(flat.view(-1).view(torch.uint8).numpy())).hexdigest()


def covariance_factor(matrix: torch.Tensor, spec: RandomRows) -> Factor:
    """The sampling factor of ``spec`` (``full`` or ``transformers``) for the rows of ``matrix``.

    Kept per process by the matrix's content (its bytes' sha256, ~0.3 s for e5's 250k x 384 rows, where
    the covariance costs ~2.4 s): the method reports the factor and the harness draws from it, in every
    trial of a grid, for the same source rows. The returned factor is shared: read it, do not change it.

    Raises:
        ValueError: ``spec`` is ``diagonal`` (it needs no factor).
    """
    if spec.distribution not in ("full", "transformers"):
        raise ValueError(f"covariance_factor: distribution {spec.distribution!r} has no covariance factor")
    key = (spec.distribution, float(spec.covariance_scale), *content_key(matrix))
    return _FACTOR_MEMO.get(key, lambda: _factor(matrix.detach().to("cpu"), spec))


def _factor(matrix: torch.Tensor, spec: RandomRows) -> Factor:
    scale = float(spec.covariance_scale)
    if spec.distribution == "transformers":
        from torch.distributions import constraints

        mean, cov = moments(matrix, dtype=torch.float32)
        scaled = scale * cov
        if bool(constraints.positive_definite.check(scaled).all()):
            return Factor(mean, torch.linalg.cholesky(scaled), "cholesky")
        return Factor(mean, None, "mean")
    mean, cov = moments(matrix, dtype=torch.float64)
    scaled = scale * cov
    root, info = torch.linalg.cholesky_ex(scaled)
    if int(info) == 0:
        return Factor(mean, root, "cholesky")
    vals, vecs = torch.linalg.eigh(scaled)
    return Factor(mean, vecs * vals.clamp(min=0).sqrt(), "eigh")


def draw(matrix: torch.Tensor, n: int, generator: torch.Generator, spec: RandomRows | None = None) -> torch.Tensor:
    """``n`` random rows for ``matrix`` (``|V| x d``) from ``spec``'s distribution, float32 on the CPU.

    ``diagonal``: ``mean + std * randn`` per dimension (``std`` with Bessel's correction, as
    ``torch.std``). ``full`` / ``transformers``: ``mean + z @ root.T`` (:func:`covariance_factor`),
    ``z`` standard normal from ``generator``.

    Example:
        >>> E = torch.ones(10, 3)
        >>> draw(E, 2, torch.Generator().manual_seed(0), RandomRows("transformers", 1e-9)).tolist()
        [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    spec = spec or RandomRows()
    d = matrix.shape[1]
    if spec.distribution == "diagonal":
        src = matrix.detach().to("cpu", torch.float32)
        mean, std = src.mean(0), src.std(0)
        return torch.randn(n, d, generator=generator, dtype=torch.float32).mul_(std).add_(mean)  # = mean + std * z
    f = covariance_factor(matrix, spec)
    if f.root is None:
        return f.mean.to(torch.float32).expand(n, d).clone()
    z = torch.randn(n, d, generator=generator, dtype=f.root.dtype)
    return (f.mean + z @ f.root.T).to(torch.float32)
