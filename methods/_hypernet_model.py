"""The pieces of ``hypernet`` that know nothing of tokenizers' mappings: decompositions, the network,
its training loop and its chunked inference (see :mod:`methods.hypernet` for the method).

The network reads a token's pieces (their frozen source embeddings plus learned position
embeddings) with a small pre-norm transformer encoder and outputs one *weight per piece*; the
token's embedding is the weighted sum of its pieces' source rows. The weights are ``1/n + delta``
(``weights="free"``) or ``softmax(delta)`` (``weights="softmax"``), and the head that gives
``delta`` starts at zero, so before the first step the output is exactly the mean of the pieces.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from harness.families import Canon
from harness.vocab import encode_canon

__all__ = ["PieceHypernet", "TrainSettings", "best_split", "pad_pieces", "train", "predict_weights", "one_thread"]


@contextlib.contextmanager
def one_thread():
    """Run torch on one intra-op thread for the duration (the previous count is restored after).

    Training and inference run inside it, so a seed gives the same rows whatever the machine's core
    count: with two threads the rows differed from one thread's by one float32 ulp (a 6k x 256 source).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _boundaries(canon: Canon, bytelevel: bool) -> list[int]:
    """Byte offsets at which ``canon.text`` may be cut (character boundaries; any byte for byte-level)."""
    text = canon.text
    if bytelevel:
        return list(range(1, len(text)))
    try:
        chars = text.decode("utf-8")
    except UnicodeDecodeError:
        return []
    offsets, pos = [], 0
    for ch in chars[:-1]:
        pos += len(ch.encode("utf-8"))
        offsets.append(pos)
    return offsets


def best_split(tok: Any, canon: Canon, *, spec: Any, token_id: int, drop: set[int], n_source: int) -> list[int] | None:
    """The source pieces of a source token's string *without the token itself*: the cut into a left
    part (keeping the word-start flag) and a right part (a continuation) whose source segmentations
    together have the fewest pieces (the leftmost such cut on ties).

    ``None`` when no cut gives two non-empty segmentations free of ``drop`` ids (specials, ``<unk>``),
    ids ``>= n_source`` and ``token_id`` itself (e.g. a one-character token).

    Example:
        >>> from tokenizers import Tokenizer, models
        >>> from transformers import PreTrainedTokenizerFast
        >>> from harness.vocab import family_spec
        >>> v = {"[UNK]": 0, "foo": 1, "##bar": 2, "foobar": 3, "##b": 4, "##ar": 5, "f": 6, "##oobar": 7}
        >>> tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece(v, unk_token="[UNK]")))
        >>> best_split(tok, Canon(b"foobar", True), spec=family_spec(tok), token_id=3, drop={0}, n_source=8)
        [6, 7]
    """
    best: list[int] | None = None
    for k in _boundaries(canon, spec.family == "bytelevel"):
        left = encode_canon(tok, Canon(canon.text[:k], canon.word_start), spec=spec)
        right = encode_canon(tok, Canon(canon.text[k:], False), spec=spec)
        pieces = left + right
        if not left or not right or any(p in drop or p >= n_source or p == token_id for p in pieces):
            continue
        if best is None or len(pieces) < len(best):
            best = pieces
    return best


def pad_pieces(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids [n, L] int64 padded with 0, mask [n, L] bool)`` with ``L`` the longest sequence.

    Example:
        >>> ids, mask = pad_pieces([[5, 6, 7], [8]])
        >>> ids.tolist(), mask.sum(1).tolist()
        ([[5, 6, 7], [8, 0, 0]], [3, 1])
    """
    width = max((len(s) for s in seqs), default=1)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
        mask[i, : len(s)] = True
    return ids, mask


class PieceHypernet(nn.Module):
    """Pieces' source rows → one weight per piece; the embedding is the weighted sum of the rows.

    Args:
        d_source: width of the source embeddings.
        hidden: width of the encoder.
        layers: transformer encoder layers (pre-norm, no dropout: nothing draws from a global RNG).
        heads: attention heads (must divide ``hidden``).
        max_pieces: learned positions; later positions share the last one.
        scale: the source embeddings' root-mean-square entry (inputs are divided by it).
        weights: ``"free"`` (``1/n + delta``) or ``"softmax"`` (``softmax(delta)``, convex).
    """

    def __init__(self, d_source: int, *, hidden: int, layers: int, heads: int, max_pieces: int, scale: float,
                 weights: str) -> None:
        super().__init__()
        self.max_pieces, self.mode = max_pieces, weights
        self.register_buffer("scale", torch.tensor(float(scale)))
        self.inp = nn.Linear(d_source, hidden)
        self.pos = nn.Embedding(max_pieces, hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, 2 * hidden, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def piece_weights(self, rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Weights ``[n, L]`` (0 at padding) for piece rows ``[n, L, d]`` under ``mask`` ``[n, L]``."""
        positions = torch.arange(rows.shape[1]).clamp(max=self.max_pieces - 1)
        x = self.inp(rows / self.scale) + self.pos(positions)[None]
        h = self.norm(self.encoder(x, src_key_padding_mask=~mask))
        delta = self.head(h).squeeze(-1)
        if self.mode == "softmax":
            return torch.softmax(delta.masked_fill(~mask, -math.inf), dim=1)
        n = mask.sum(1, keepdim=True).to(rows.dtype)
        return (1.0 / n + delta) * mask

    def forward(self, rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Embeddings ``[n, d]``: the weighted sums of the piece rows."""
        return (self.piece_weights(rows, mask)[..., None] * rows).sum(1)


@dataclass(frozen=True)
class TrainSettings:
    """What :func:`train` needs from the method's config (see :class:`methods.hypernet.HypernetConfig`)."""

    steps: int
    batch_size: int
    lr: float
    weight_decay: float
    mse_weight: float
    select: str = "best-holdout"
    log_every: int = 0


@dataclass
class TrainReport:
    """What training did, for the record."""

    curve: list[tuple[int, float]] = field(default_factory=list)
    train_loss_first: float | None = None
    train_loss_last: float | None = None
    holdout: dict = field(default_factory=dict)
    holdout_curve: list[tuple[int, float]] = field(default_factory=list)
    selected_step: int | None = None
    seconds: float = 0.0


def reconstruct_loss(pred: torch.Tensor, target: torch.Tensor, mse_weight: float) -> torch.Tensor:
    """``mean(1 - cos) + mse_weight * sum ||pred - target||² / sum ||target||²`` (the ``reconstruct`` objective).

    Example:
        >>> t = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
        >>> float(reconstruct_loss(t, t, 1.0)), float(reconstruct_loss(-t, t, 0.0))
        (0.0, 2.0)
    """
    cos = F.cosine_similarity(pred, target, dim=1, eps=1e-12)
    rel = ((pred - target) ** 2).sum() / (target**2).sum().clamp(min=1e-30)
    return (1.0 - cos).mean() + mse_weight * rel


def _evaluate(net: PieceHypernet, E: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor,
              mse_weight: float) -> dict:
    if not len(ids):
        return {}
    with torch.no_grad():
        pred = net(E[ids], mask)
        cos = F.cosine_similarity(pred, E[targets], dim=1, eps=1e-12)
        return {"loss": round(float(reconstruct_loss(pred, E[targets], mse_weight)), 6),
                "cosine_mean": round(float(cos.mean()), 6)}


def train(net: PieceHypernet, E: torch.Tensor, data: dict, settings: TrainSettings, generator: torch.Generator) -> TrainReport:
    """Fit ``net`` so that its output for each training token's pieces approaches the token's own row.

    Args:
        net: the hypernetwork (trained in place; with ``settings.select == "best-holdout"`` it ends with
            the parameters of the logged step, step 0 = mean-of-pieces included, of lowest held-out loss).
        E: the frozen source embeddings ``[V, d]`` float32.
        data: ``{"ids", "mask", "targets"}`` for training and ``{"hold_ids", "hold_mask", "hold_targets"}``
            held out (tensors from :func:`pad_pieces`; targets are token ids).
        settings: steps, batch size, optimizer, loss weights and the selection rule.
        generator: draws every batch (``torch.randint``).

    Runs on one torch thread (:func:`one_thread`): the result does not depend on the core count.

    Returns:
        The loss curves (training and held-out, every ``log_every`` steps), first/last training loss and
        the held-out loss and mean cosine before training (= mean of pieces) and of the returned network.
    """
    with one_thread():
        return _train(net, E, data, settings, generator)


def _train(net: PieceHypernet, E: torch.Tensor, data: dict, settings: TrainSettings, generator: torch.Generator) -> TrainReport:
    t0 = time.perf_counter()
    report = TrainReport()
    hold = (data["hold_ids"], data["hold_mask"], data["hold_targets"])
    report.holdout["before"] = _evaluate(net, E, *hold, settings.mse_weight)
    select = settings.select == "best-holdout" and bool(report.holdout["before"])
    best = (report.holdout["before"]["loss"], 0, copy.deepcopy(net.state_dict())) if select else None
    opt = torch.optim.AdamW(net.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    n = len(data["ids"])
    every = settings.log_every or max(1, settings.steps // 10)
    for step in range(1, settings.steps + 1):
        batch = torch.randint(n, (min(settings.batch_size, n),), generator=generator)
        ids, mask = data["ids"][batch], data["mask"][batch]
        width = int(mask.sum(1).max())
        loss = reconstruct_loss(net(E[ids[:, :width]], mask[:, :width]), E[data["targets"][batch]], settings.mse_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        report.train_loss_last = round(float(loss.detach()), 6)
        report.train_loss_first = report.train_loss_first if step > 1 else report.train_loss_last
        if step == 1 or step % every == 0 or step == settings.steps:
            report.curve.append((step, report.train_loss_last))
            if select:
                held = _evaluate(net, E, *hold, settings.mse_weight)["loss"]
                report.holdout_curve.append((step, held))
                if held < best[0]:
                    best = (held, step, copy.deepcopy(net.state_dict()))
    if select:
        net.load_state_dict(best[2])
        report.selected_step = best[1]
    report.holdout["after"] = _evaluate(net, E, *hold, settings.mse_weight)
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def predict_weights(net: PieceHypernet, E: torch.Tensor, seqs: list[list[int]], chunk_rows: int) -> list[np.ndarray]:
    """Per sequence of piece ids, the network's weight per piece (float32), in chunks of ``chunk_rows``
    sequences of similar length (memory ~ ``chunk_rows x longest x d``), on one torch thread."""
    out: list[np.ndarray] = [np.zeros(0, np.float32)] * len(seqs)
    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i]), i))
    with torch.no_grad(), one_thread():
        for a in range(0, len(order), chunk_rows):
            chunk = order[a : a + chunk_rows]
            ids, mask = pad_pieces([seqs[i] for i in chunk])
            w = net.piece_weights(E[ids], mask).numpy()
            for row, i in enumerate(chunk):
                out[i] = w[row, : len(seqs[i])].astype(np.float32)
    return out
