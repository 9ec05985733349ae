"""WECHSEL's checks before the long work (its ``preflight`` hook, run by ``tokxfer init``).

With ``source_tokens=all`` every source token competes as a neighbour, and its vector is the sum of
its character n-grams' fastText buckets: tokens whose n-grams the source word vectors never saw
(the other-language tokens of a multilingual source, other scripts above all) get noise vectors.
:func:`check_wechsel_source` counts them before anything is trained and warns with the fix.
:func:`check_dictionary_reachable` fails a dictionary no target word vectors could use before they are trained.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from harness import vocab as _canon
from harness.errors import UserInputError

_SAMPLE_BYTES = 32 << 20  # corpus text read to collect its vocabulary


def fasttext_bin_words(path: Path, limit: int) -> tuple[list[str], int, int]:
    """The ``limit`` most frequent words of a fastText ``.bin`` and its ``minn``/``maxn``, without loading the matrix.

    Reads fastText's header (magic, version, the arguments) and the dictionary entries, which come
    sorted by decreasing frequency.
    """
    import struct

    with open(path, "rb") as f:
        magic, _version = struct.unpack("<ii", f.read(8))
        if magic != 793712314:
            raise UserInputError(f"--source-word-vectors {path}: not a fastText .bin (bad magic number)")
        args = struct.unpack("<12id", f.read(12 * 4 + 8))
        minn, maxn = args[9], args[10]
        size, _nwords, _nlabels = struct.unpack("<iii", f.read(12))
        f.read(16)  # ntokens, pruneidx_size
        words = []
        buf = b""
        for _ in range(min(size, limit)):
            while b"\0" not in buf:
                chunk = f.read(1 << 16)
                if not chunk:
                    raise UserInputError(f"--source-word-vectors {path}: truncated fastText dictionary")
                buf += chunk
            w, buf = buf.split(b"\0", 1)
            while len(buf) < 9:
                buf += f.read(1 << 16)
            buf = buf[9:]  # count (int64), entry type (int8)
            words.append(w.decode("utf-8", errors="replace"))
    return words, minn, maxn


def _grams(s: str, minn: int, maxn: int) -> set[str]:
    """A token string's character n-grams of lengths ``minn..maxn`` (the string itself when shorter)."""
    if len(s) < minn:
        return {s}
    return {s[i:i + n] for n in range(minn, maxn + 1) for i in range(len(s) - n + 1)}


def ngram_coverage(source_tok: Any, words: list[str], minn: int, maxn: int) -> dict:
    """How many source tokens have their character n-grams in the source word vectors' vocabulary.

    A source token's WECHSEL vector is the sum of the vectors of its character n-grams. fastText
    hashes every n-gram into a bucket, so a token whose n-grams never occur in the text the vectors
    were trained on still gets a vector, made of buckets that unrelated n-grams trained: noise.
    Counted here, with ``words`` (the vectors' vocabulary) standing for that text and n-grams taken
    inside the strings (without fastText's ``<``/``>`` word boundaries, which would count every
    word-internal piece as unseen): tokens none of whose n-grams occur inside a word
    (``none_seen``) and tokens most of whose n-grams do not (``mostly_unseen``). A monolingual
    source scores near zero; the other-language tokens of a multilingual source (other scripts
    above all) make up most of the count.
    """

    seen: set[str] = set()
    for w in words:
        seen |= {w[i:i + n] for n in range(1, maxn + 1) for i in range(len(w) - n + 1)}
    specials = _canon.special_ids(source_tok)
    strings = _canon.token_strings(source_tok)  # one pass (token_string per id rebuilds the specials each time)
    n = none = mostly = 0
    for i in range(len(source_tok)):
        if i in specials:
            continue
        s = strings[i]
        if not s or not s.strip():
            continue
        grams = _grams(s, minn, maxn)
        n += 1
        k = sum(1 for g in grams if g in seen)
        none += k == 0
        mostly += 2 * k < len(grams)
    return {"tokens": n, "none_seen": none, "mostly_unseen": mostly, "words": len(words), "minn": minn, "maxn": maxn}


def check_wechsel_source(cfg: Any, paths: dict, source_tok: Any, notes: Any) -> dict | None:
    """Warn when WECHSEL with ``source_tokens=all`` would give many source tokens n-gram noise vectors."""
    if cfg.source_tokens != "all" or cfg.variant != "subword":
        return None
    vec = paths.get("source_word_vectors")
    if vec is not None:
        name = vec.name.lower()
        if not name.endswith(".bin"):
            return None  # text vectors have no n-grams
        words, minn, maxn = fasttext_bin_words(vec, 100_000)
        origin = "the 100,000 most frequent words of --source-word-vectors"
    elif paths.get("source_corpus") is not None:
        counts = corpus_vocabulary_cased(paths["source_corpus"])
        words = [w for w, c in counts.most_common(100_000) if c >= cfg.min_count]
        minn, maxn = cfg.minn, cfg.maxn
        origin = f"the words of --source-corpus seen >= min_count={cfg.min_count} times"
    else:
        return None
    if maxn <= 0:
        return None
    cov = ngram_coverage(source_tok, words, minn, maxn)
    cov["vocabulary"] = origin
    share_none, share_mostly = cov["none_seen"] / max(cov["tokens"], 1), cov["mostly_unseen"] / max(cov["tokens"], 1)
    cov.update(share_none_seen=round(share_none, 4), share_mostly_unseen=round(share_mostly, 4))
    msg = (f"WECHSEL: {cov['none_seen']:,} of {cov['tokens']:,} source tokens ({share_none:.0%}) have none of their character "
           f"{minn}-{maxn}-grams in {origin}, and {cov['mostly_unseen']:,} ({share_mostly:.0%}) miss most of them; with "
           "source_tokens=all their vectors are sums of n-gram buckets trained on other words (noise), yet they compete as "
           "neighbours. For a multilingual source (XLM-R …) pass --source-tokens english-only --english-tokenizer DIR "
           "(FOCUS paper), or --config source_tokens=english-only english_tokens=source-corpus")
    if share_mostly >= 0.2:
        notes.warn(msg)
    else:
        notes.note(f"WECHSEL: {share_mostly:.0%} of the source tokens miss most of their n-grams in {origin} (fine)")
    return cov


def corpus_vocabulary_cased(path: Path, max_bytes: int = _SAMPLE_BYTES) -> Counter:
    """Word counts (case kept, fastText-style words) of the first ``max_bytes`` of a corpus."""
    counts: Counter = Counter()
    read = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            counts.update(_canon.word_tokenize(line))
            read += len(line)
            if read >= max_bytes:
                break
    return counts


def check_dictionary_reachable(dictionary: Path, source: Any, target_corpus: Path, *, min_count: int,
                               case_expansion: str) -> dict:
    """Raise the alignment's :class:`~methods._wordvectors.DictionaryError` before target word vectors are trained,
    when no pair of ``dictionary`` could be used with them.

    fastText's vocabulary is the words of the word-split corpus that occur at least ``min_count`` times
    (:func:`methods._wordvectors.train_word_vectors` splits with :func:`harness.words.word_tokenize`), so a target
    word (or case variant) counted fewer times here is never in it. When no pair has such a target word and a
    source word in ``source`` (the source word vectors, already there), the alignment after training would fail
    with "no usable word pairs": it fails now, and the training (16 s a trial for a small corpus) is saved.
    Otherwise nothing changes; the cost is one pass over the corpus (as the word split before training makes).
    Returns what was counted (``pairs``, ``target_words_reaching_min_count``).

    Example:
        >>> import tempfile
        >>> import numpy as np
        >>> from methods._wordvectors import DictionaryError, WordVectors
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "dict.tsv").write_text("Katze\\tcat\\n", encoding="utf-8")
        >>> _ = (d / "de.txt").write_text("die katze schläft\\n", encoding="utf-8")
        >>> src = WordVectors.from_matrix(["cat"], np.ones((1, 2), dtype=np.float32), origin="en.vec")
        >>> check_dictionary_reachable(d / "dict.tsv", src, d / "de.txt", min_count=1, case_expansion="unique")
        {'pairs': 1, 'target_words_reaching_min_count': 1}
        >>> try:
        ...     check_dictionary_reachable(d / "dict.tsv", src, d / "de.txt", min_count=2, case_expansion="unique")
        ... except DictionaryError as e:
        ...     print("de.txt occurring at least 2 times" in str(e), "0 target words" in str(e))
        True True
    """
    from methods._wordvectors import _case_variants, match_dictionary, no_pairs_error, word_counts

    pairs, malformed = _canon.read_dictionary(dictionary)
    wanted = {v for t, _ in pairs for v in _case_variants(t)}
    reachable = {w for w, c in word_counts(target_corpus).items() if c >= min_count and w in wanted}
    match = match_dictionary(pairs, reachable.__contains__, source.__contains__, n_malformed=malformed,
                             case_expansion=case_expansion)
    if not match.pairs:
        raise no_pairs_error(str(dictionary), match, f"the words of {target_corpus} occurring at least {min_count} "
                             "times (counted before training target word vectors on it)", source)
    return {"pairs": len(pairs), "target_words_reaching_min_count": len(reachable)}
