"""Checks of ``tokxfer init``'s inputs before the long work.

Column order. Every two-column file tokxfer reads puts the **target language first**: a
dictionary is ``TARGET_WORD<TAB>SOURCE_WORD``, a TSV parallel corpus ``TARGET<TAB>SOURCE``.
(WECHSEL's reference dictionaries are ``english<TAB>target``: the other way round.) Before any
long work, :func:`orientation` counts how many words of each column occur on each side (the target
and source corpora, or how finely each tokenizer splits them); a file whose columns look swapped
is an **error** naming the flag and the fix (``--swap-dictionary`` / ``--swap-parallel``), never a
silent swap: a wrong guess would silently change the rows. A parallel corpus may be JSON lines
``{"source": …, "target": …}`` or TSV; :func:`read_pairs` sniffs the format from the first
non-blank line, and a TSV is converted to JSON lines in the cache (kind ``inputs``) for the method.

Other checks: a source checkpoint without the head of ``--kind`` (:func:`harness.model.heads.missing_head`). Checks that
need a method's own knowledge live with the method, behind its optional ``preflight`` hook
(:class:`harness.protocols.EmbeddingInitializer`): WECHSEL's n-gram coverage of the source tokens,
FOCUS's forecast of random rows.

Provenance categories. A method labels each target row special / copied / combined / fallback
(:data:`harness.protocols.PROVENANCE_NAMES`), but the labels do not mean the same across methods:
Tik-to-Tok, VIPI and mean-of-pieces call a row built from *one* source row "copied" even when that
row belongs to a different token (a one-word alignment), while FOCUS and WECHSEL call such a row
"combined". ``tokxfer init`` (and every trial's ``init_info.json``) therefore also counts rows by what
the mapping *is*, the same way for every method: :mod:`harness.model.provenance`.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import TokxferError


class InitInputError(TokxferError, ValueError):
    """An input of ``tokxfer init`` is missing, malformed or inconsistent; the message names the flag."""


def stamped(t0: float, msg: str) -> None:
    """Print ``msg`` on stderr as one of ``tokxfer init``'s lines: ``[  12.3s] msg``, seconds since ``t0``."""
    print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)


class Notes:
    """Notes and warnings of one ``tokxfer init`` run: printed to stderr and kept for init_info.json."""

    def __init__(self, quiet: bool = False, *, t0: float | None = None, watchdog: Any = None) -> None:
        self.quiet = quiet
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.t0 = time.perf_counter() if t0 is None else t0
        self.watchdog = watchdog  # a harness.progress.Watchdog told of every line (a log never goes silent)

    def note(self, msg: str) -> None:
        self.notes.append(msg)
        if not self.quiet:
            stamped(self.t0, msg)
            if self.watchdog is not None:
                self.watchdog.touch(msg)

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)
        print(f"tokxfer: warning: {msg}", file=sys.stderr, flush=True)
        if self.watchdog is not None:
            self.watchdog.touch()


_WORD = re.compile(r"\w+(?:['’-]\w+)*")
_SAMPLE_BYTES = 32 << 20  # corpus text read to collect its vocabulary (enough for every check)


def corpus_vocabulary(path: Path, max_bytes: int = _SAMPLE_BYTES) -> Counter:
    """Lower-cased word counts of the first ``max_bytes`` of a corpus (words: runs of letters/digits)."""
    counts: Counter = Counter()
    read = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            counts.update(w.lower() for w in _WORD.findall(line))
            read += len(line)
            if read >= max_bytes:
                break
    return counts


def _fertility(tok: Any, words: list[str]) -> float:
    """Mean number of tokens per word (each word tokenized alone, as a word of running text).

    An unknown-token piece counts once per character it covers, as a tokenizer that knew the
    characters would need at least that many pieces: a tokenizer that has never seen a script folds a
    whole word into one ``<unk>`` and would otherwise look like the one that splits it least.
    """
    if not words:
        return float("nan")
    enc = tok([" " + w for w in words], add_special_tokens=False, return_offsets_mapping=True)
    unk = getattr(tok, "unk_token_id", None)
    pieces = 0
    for ids, offsets in zip(enc["input_ids"], enc["offset_mapping"]):
        pieces += sum(max(b - a, 1) if i == unk else 1 for i, (a, b) in zip(ids, offsets))
    return pieces / len(words)


@dataclass
class Orientation:
    """How the two columns of a two-column file match the target and source sides.

    Attributes:
        verdict: ``"ok"`` (first column = target), ``"swapped"`` or ``"unknown"`` (no evidence either way).
        evidence: the numbers behind it, per side and column, and which resources were used.
    """

    verdict: str
    evidence: dict


def orientation(first: list[str], second: list[str], *, target_vocab: Counter | None, source_vocab: Counter | None,
                target_tok: Any = None, source_tok: Any = None) -> Orientation:
    """Decide whether ``first`` holds target-language words and ``second`` source-language words.

    With corpora: the share of each column's distinct words that occur in the target corpus (and
    in the source corpus). The columns are *swapped* when the second column's share in the target
    corpus exceeds the first's by at least 0.1 and by half (and the source corpus, if given, does
    not say the opposite), or the mirror image in the source corpus. Without corpora: how many
    pieces the target tokenizer needs per word of each column, relative to the source tokenizer (a
    tokenizer trained on the target language splits its words less); swapped when the first
    column's ratio exceeds the second's by a quarter.
    """
    a = list(dict.fromkeys(w.lower() for w in first if w))[:20000]
    b = list(dict.fromkeys(w.lower() for w in second if w))[:20000]
    ev: dict[str, Any] = {"distinct_first": len(a), "distinct_second": len(b)}

    def share(words: list[str], vocab: Counter) -> float:
        return sum(1 for w in words if w in vocab) / max(len(words), 1)

    votes = []
    for side, vocab in (("target", target_vocab), ("source", source_vocab)):
        if vocab is None:
            continue
        sa, sb = share(a, vocab), share(b, vocab)
        ev[f"{side}_corpus"] = {"first_column_share": round(sa, 4), "second_column_share": round(sb, 4)}
        mine, other = (sa, sb) if side == "target" else (sb, sa)  # the column that should be this side's
        if other - mine >= 0.1 and other >= 1.5 * mine:
            votes.append("swapped")
        elif mine - other >= 0.1 and mine >= 1.5 * other:
            votes.append("ok")
    if not votes and target_tok is not None and source_tok is not None and target_vocab is None and source_vocab is None:
        sample_a, sample_b = a[:2000], b[:2000]
        ra = _fertility(target_tok, sample_a) / max(_fertility(source_tok, sample_a), 1e-9)
        rb = _fertility(target_tok, sample_b) / max(_fertility(source_tok, sample_b), 1e-9)
        ev["tokenizers"] = {"first_column_ratio": round(ra, 4), "second_column_ratio": round(rb, 4),
                            "ratio": "target-tokenizer pieces per word / source-tokenizer pieces per word"}
        if ra >= 1.25 * rb:
            votes.append("swapped")
        elif rb >= 1.25 * ra:
            votes.append("ok")
    verdict = "unknown" if not votes or len(set(votes)) > 1 else votes[0]
    ev["votes"] = votes
    return Orientation(verdict, ev)


def _evidence_text(ev: dict) -> str:
    parts = []
    for side in ("target", "source"):
        if f"{side}_corpus" in ev:
            e = ev[f"{side}_corpus"]
            parts.append(f"{e['first_column_share']:.0%} of the first column's words and {e['second_column_share']:.0%} "
                         f"of the second's occur in --{side}-corpus")
    if "tokenizers" in ev:
        e = ev["tokenizers"]
        parts.append(f"--target-tokenizer splits the first column's words {e['first_column_ratio']:.2f}x and the "
                     f"second's {e['second_column_ratio']:.2f}x as finely as the source tokenizer")
    return "; ".join(parts)


def read_pairs(path: Path, flag: str, limit: int | None = None) -> tuple[list[tuple[str, str]], str]:
    """Read a two-sided file: JSON lines ``{"source", "target"}`` or TSV; returns ``(first, second)`` pairs and the format.

    For JSON lines the pairs are ``(target, source)``, for TSV the columns in file order, so both
    read as *target first* when the file follows tokxfer's convention.

    Raises:
        InitInputError: a line that does not fit the sniffed format (file, line and what was expected).
    """
    pairs: list[tuple[str, str]] = []
    fmt = None
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            if fmt is None:
                fmt = "jsonl" if line.lstrip().startswith("{") else "tsv"
            if fmt == "jsonl":
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InitInputError(f"{flag} {path}:{lineno}: not valid JSON ({e.msg}); the file was sniffed as JSON "
                                         "lines from its first line") from None
                if not (isinstance(obj, dict) and isinstance(obj.get("source"), str) and isinstance(obj.get("target"), str)):
                    raise InitInputError(f'{flag} {path}:{lineno}: expected an object with string fields "source" and "target"')
                pairs.append((obj["target"], obj["source"]))
            else:
                parts = line.split("\t")
                if len(parts) < 2 or not parts[0].strip() or not parts[1].strip():
                    raise InitInputError(f"{flag} {path}:{lineno}: expected two tab-separated fields TARGET<TAB>SOURCE "
                                         "(or JSON lines {\"source\": ..., \"target\": ...}), got "
                                         f"{len([p for p in parts if p.strip()])} field(s)")
                pairs.append((parts[0].strip(), parts[1].strip()))
            if limit is not None and len(pairs) >= limit:
                break
    if not pairs:
        raise InitInputError(f"{flag} {path}: contains no pairs")
    return pairs, fmt or "tsv"


def _words(texts: Iterable[str]) -> list[str]:
    return [w for t in texts for w in _WORD.findall(t)]


def _write_converted(kind_key: dict, write: Callable[[Path], None]) -> Path:
    """A converted input in the cache (``<cache>/inputs/<hash>/``), built once per content."""
    from harness.cache import cached_dir
    from harness.run.resources import cache_dir

    d = cached_dir("inputs", kind_key, lambda out: write(out / "data"), root=cache_dir())
    return d / "data"


def prepare_dictionary(path: Path, swap: bool, ctx: dict, notes: Notes) -> tuple[Path, dict]:
    """Check the dictionary's orientation; returns the file for the method (swapped copy with ``--swap-dictionary``)."""
    from harness.vocab import read_dictionary

    pairs, malformed = read_dictionary(path)
    if not pairs:
        raise InitInputError(f"--dictionary {path}: no TARGET<TAB>SOURCE pairs ({malformed} malformed line(s))")
    first, second = [p[0] for p in pairs], [p[1] for p in pairs]
    if swap:
        first, second = second, first
    o = orientation(first, second, **ctx)
    info = {"pairs": len(pairs), "malformed_lines": malformed, "swapped_by_flag": swap, "orientation": o.verdict,
            "evidence": o.evidence}
    if o.verdict == "swapped":
        fix = ("drop --swap-dictionary" if swap else
               "pass --swap-dictionary (or swap the columns: awk -F'\\t' -v OFS='\\t' '{print $2,$1}')")
        raise InitInputError(f"--dictionary {path}: the columns look swapped — tokxfer reads TARGET_WORD<TAB>SOURCE_WORD, but "
                             f"{_evidence_text(o.evidence)}; {fix}")
    if o.verdict == "unknown":
        notes.note(f"--dictionary: could not tell the column order from the corpora/tokenizers ({_evidence_text(o.evidence) or 'no evidence'}); "
                   "read as TARGET<TAB>SOURCE" + (" after --swap-dictionary" if swap else ""))
    else:
        notes.note(f"--dictionary: {len(pairs)} pairs, TARGET<TAB>SOURCE order confirmed ({_evidence_text(o.evidence)})")
    if not swap:
        return path, info

    def write(out: Path) -> None:
        with open(out, "w", encoding="utf-8") as f:
            for t, s in zip(first, second):
                f.write(f"{t}\t{s}\n")

    from harness.cache import file_hash

    conv = _write_converted({"what": "dictionary-swapped", "sha256": file_hash(path)}, write)
    info["converted"] = str(conv)
    return conv, info


def prepare_parallel(path: Path, swap: bool, ctx: dict, notes: Notes) -> tuple[Path, dict]:
    """Sniff the parallel corpus (JSON lines or TSV), check its orientation; JSON lines for the method."""
    pairs, fmt = read_pairs(path, "--parallel-corpus")
    tgt_side, src_side = [p[0] for p in pairs], [p[1] for p in pairs]
    if swap:
        tgt_side, src_side = src_side, tgt_side
    sample = slice(0, 5000)
    o = orientation(_words(tgt_side[sample]), _words(src_side[sample]), **ctx)
    info = {"format": fmt, "pairs": len(pairs), "swapped_by_flag": swap, "orientation": o.verdict, "evidence": o.evidence}
    what = "TARGET<TAB>SOURCE columns" if fmt == "tsv" else '"target"/"source" fields'
    if o.verdict == "swapped":
        fix = "drop --swap-parallel" if swap else "pass --swap-parallel"
        raise InitInputError(f"--parallel-corpus {path}: the sides look swapped — tokxfer reads {what}, but "
                             f"{_evidence_text(o.evidence).replace('column', 'side')}; {fix}")
    notes.note(f"--parallel-corpus: {len(pairs)} sentence pairs, {'JSON lines' if fmt == 'jsonl' else 'TSV'}"
               + (f", order confirmed ({_evidence_text(o.evidence).replace('column', 'side')})" if o.verdict == "ok" else
                  ", order could not be checked (no evidence either way)"))
    if fmt == "jsonl" and not swap:
        return path, info

    def write(out: Path) -> None:
        with open(out, "w", encoding="utf-8") as f:
            for t, s in zip(tgt_side, src_side):
                f.write(json.dumps({"source": s, "target": t}, ensure_ascii=False) + "\n")

    from harness.cache import file_hash

    conv = _write_converted({"what": "parallel-jsonl", "sha256": file_hash(path), "swap": swap}, write)
    info["converted"] = str(conv)
    return conv, info
