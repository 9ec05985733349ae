"""``tokxfer tokenizer train`` and ``tokxfer cache ls | prune``: the commands around ``tokxfer init``."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness.cli.init_checks import InitInputError, Notes, _fertility, _words

# --------------------------------------------------------------------------------------------
# `tokxfer tokenizer train`


def add_tokenizer_arguments(sp: argparse.ArgumentParser) -> None:
    """``tokxfer tokenizer train CORPUS… --vocab-size N [--like SOURCE] [--algorithm A] --out DIR``."""
    sub = sp.add_subparsers(dest="action", required=True)
    t = sub.add_parser("train", help="train a tokenizer on target-language text, like the source model's")
    t.description = (
        "Train a subword tokenizer on CORPUS for use as `tokxfer init --target-tokenizer`. With --like SOURCE the\n"
        "algorithm, the special tokens and the lowercasing follow the source model's tokenizer family\n"
        "(SentencePiece Unigram/BPE: <s> <pad> </s> <unk> <mask> and NFKC, as XLM-R; byte-level BPE as RoBERTa/GPT-2;\n"
        "WordPiece: [PAD] [UNK] [CLS] [SEP] [MASK], as BERT). Trained tokenizers are cached by content."
    )
    t.formatter_class = argparse.RawDescriptionHelpFormatter
    from harness.families import ALGORITHMS  # not harness.tokenizers: building the parser must not import transformers

    t.add_argument("corpus", nargs="+", help="UTF-8 text files, one sentence or document per line")
    t.add_argument("--algorithm", choices=ALGORITHMS, default=None,
                   help="default: the algorithm of --like's tokenizer (required without --like)")
    t.add_argument("--vocab-size", type=int, required=True, help="vocabulary size, special tokens included")
    t.add_argument("--like", default=None, metavar="SOURCE",
                   help="source model (or tokenizer) directory or hub id whose tokenizer family to follow")
    t.add_argument("--lowercase", action=argparse.BooleanOptionalAction, default=None,
                   help="lowercase the text (default: as --like's tokenizer does; off without --like)")
    t.add_argument("--out", required=True, help="output directory (new or empty, unless --overwrite)")
    t.add_argument("--overwrite", action="store_true", help="write into a non-empty --out directory")


def _family_algorithm(tok: Any) -> tuple[str, bool]:
    """The :func:`harness.tokenizers.train_tokenizer` algorithm of a tokenizer's family, and whether it lowercases."""
    from harness import vocab as _canon

    family = _canon.tokenizer_family(tok)
    backend = getattr(tok, "backend_tokenizer", None)
    model = type(backend.model).__name__ if backend is not None else ""
    algo = {"bytelevel": "bytelevel-bpe", "wordpiece": "wordpiece"}.get(family) or ("bpe" if model == "BPE" else "unigram")
    norm = getattr(backend, "normalizer", None) if backend is not None else None
    lowercase = bool(norm is not None and norm.normalize_str("ABC Ä") == "abc ä")
    return algo, lowercase


def train_tokenizer_command(args: argparse.Namespace) -> int:
    """``tokxfer tokenizer train``: a tokenizer for ``tokxfer init --target-tokenizer``."""
    from harness import progress
    from harness import vocab as _canon
    from harness.run import resources
    from harness.tokenizers import tokenizer_info, train_tokenizer

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.overwrite:
        raise FileExistsError(f"--out {out}: {'exists and is not a directory' if not out.is_dir() else 'is not empty'}; "
                              "choose a new directory or pass --overwrite")
    paths = [Path(c).expanduser() for c in args.corpus]
    for p in paths:
        if not p.is_file():
            raise InitInputError(f"CORPUS {p}: file not found")
    like = None
    algorithm, lowercase = args.algorithm, bool(args.lowercase)
    if args.like:
        like = resources.load_tokenizer(args.like)
        fam_algo, fam_lower = _family_algorithm(like)
        if algorithm is None:
            algorithm = fam_algo
        elif algorithm != fam_algo:
            print(f"tokxfer: warning: --algorithm {algorithm} differs from --like's family ({fam_algo}); special tokens are "
                  "matched by role, but the target will not be tokenized like the source", file=sys.stderr)
        if args.lowercase is None:
            lowercase = fam_lower
    elif algorithm is None:
        raise InitInputError("--algorithm is required without --like (unigram, bpe, bytelevel-bpe or wordpiece)")
    t0 = time.perf_counter()
    tty = sys.stderr.isatty()  # a terminal gets the trainer's own bar; a log gets plain lines with a heartbeat
    with progress.reporting(None, lines=None if tty else Notes().note):
        tok = train_tokenizer(paths, algorithm, args.vocab_size, lowercase=lowercase, cache_dir=resources.cache_dir(),
                              progress=tty)
    seconds = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out)
    info = tokenizer_info(tok)
    roles = _canon.special_roles(tok)
    line = (f"wrote {out}: {algorithm} tokenizer, {len(tok):,} tokens{' (lowercased)' if lowercase else ''}, trained on "
            f"{sum(p.stat().st_size for p in paths) / 1e6:.1f} MB in {seconds:.1f}s"
            + (" (cached)" if seconds < 0.5 * float(info.get('train_seconds') or 0) else ""))
    print(line)
    print("special tokens: " + ", ".join(f"{r} {tok.convert_ids_to_tokens(i)}" for r, i in sorted(roles.items(), key=lambda x: x[1])))
    if like is not None:
        src_roles = _canon.special_roles(like)
        lost = sorted(set(src_roles) - set(roles))
        print(f"like {args.like}: family {_canon.tokenizer_family(like)}, {len(like):,} tokens"
              + (f"; roles the source has and this tokenizer lacks: {', '.join(lost)}" if lost else "; every special role matched"))
        sample = []
        with open(paths[0], encoding="utf-8", errors="replace") as f:
            for line_text in f:
                sample.append(line_text.strip())
                if len(sample) >= 2000:
                    break
        words = _words(sample)[:20000]
        if words:
            print(f"pieces per word on {len(words):,} words of {paths[0].name}: {_fertility(tok, words):.2f} "
                  f"(source tokenizer: {_fertility(like, words):.2f})")
    return 0


# --------------------------------------------------------------------------------------------
# `tokxfer cache ls | prune`


def add_cache_arguments(sp: argparse.ArgumentParser) -> None:
    """``tokxfer cache ls``, ``tokxfer cache prune`` and ``tokxfer cache init``."""
    sub = sp.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("ls", help="list the cache's entries: kind, size, age")
    ls.add_argument("--kind", action="append", help="only this kind (repeatable), e.g. fasttext")
    pr = sub.add_parser("prune", help="delete cache entries (everything in the cache can be rebuilt)")
    pr.add_argument("--kind", action="append", help="entries of this kind (repeatable), e.g. fasttext, inits")
    pr.add_argument("--older-than", default=None, metavar="AGE", help="entries built longer ago than AGE, e.g. 30d, 12h, 90m")
    pr.add_argument("--all", action="store_true", help="every entry")
    pr.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    init = sub.add_parser("init", help="create the cache folder, or adopt the cache of an older tokxfer (marks it as tokxfer's)")
    for p in (ls, pr, init):
        p.description = ("The cache lives in $TOKXFER_CACHE, else $XDG_CACHE_HOME/tokxfer, else ~/.cache/tokxfer (absolute "
                         "paths; a relative value is refused). Entries are named by the content hash of what they were "
                         "built from; a deleted entry is rebuilt when needed. Do not prune while a run that uses the cache "
                         "is going on. `ls` and `prune` work only in a folder tokxfer created (it holds a .tokxfer-cache "
                         "file); `init` adopts a cache made by an older tokxfer, after checking that everything in it is "
                         "tokxfer's. Prune deletes only entries tokxfer wrote, and symbolic links as links.")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _age(seconds: float) -> str:
    for unit, s in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= s:
            return f"{seconds / s:.0f}{unit}"
    return f"{seconds:.0f}s"


def cache_command(args: argparse.Namespace) -> int:
    """``tokxfer cache ls | prune | init``."""
    from rich.console import Console
    from rich.table import Table

    from harness.cache import adopt_root, cache_root, list_entries, parse_age, remove_entries

    root = cache_root()
    con = Console(soft_wrap=True)
    if args.action == "init":
        root, what = adopt_root(root)
        con.print({"created": f"created the tokxfer cache {root}",
                   "already": f"{root} is already a tokxfer cache"}.get(what, f"{root}: {what} (now a tokxfer cache)"))
        return 0
    entries = list_entries(root, command=f"cache {args.action}")
    now = time.time()
    kinds = sorted({e.kind for e in entries})
    for k in getattr(args, "kind", None) or []:
        if k not in kinds:
            raise InitInputError(f"--kind {k!r}: no such kind in the cache {root} (kinds: {', '.join(kinds) or 'none, the cache is empty'})")
    if args.action == "ls":
        chosen = [e for e in entries if not args.kind or e.kind in args.kind]
        t = Table(title=f"tokxfer cache {root}", title_justify="left")
        for c, j in (("kind", "left"), ("entry", "left"), ("what", "left"), ("size", "right"), ("age", "right")):
            t.add_column(c, justify=j)
        for e in chosen:
            t.add_row(e.kind, e.path.name + (" (partial)" if e.partial else ""), e.what, _size(e.bytes), _age(now - e.mtime))
        con.print(t)
        per_kind = Counter()
        for e in chosen:
            per_kind[e.kind] += e.bytes
        con.print(f"{len(chosen)} entries, {_size(sum(per_kind.values()))}"
                  + (": " + ", ".join(f"{k} {_size(v)}" for k, v in sorted(per_kind.items())) if per_kind else ""))
        return 0
    if not (args.all or args.kind or args.older_than):
        raise InitInputError("cache prune: say what to delete: --kind K, --older-than AGE, --all (with --dry-run to look first)")
    older = parse_age(args.older_than) if args.older_than else None
    matching = [e for e in entries if (args.all or not args.kind or e.kind in args.kind)
                and (older is None or now - e.mtime > older)]
    chosen = [e for e in matching if e.owned or e.link]
    foreign = [e for e in matching if not (e.owned or e.link)]
    links = sum(1 for e in chosen if e.link)
    total = sum(e.bytes for e in chosen)
    kept = (f"; left alone {len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} tokxfer did not write "
            f"({', '.join(f'{e.kind}/{e.path.name}' for e in foreign[:3])}{' …' if len(foreign) > 3 else ''})" if foreign else "")
    linked = f" ({links} of them symbolic links: the links only, never what they point to)" if links else ""
    if args.dry_run:
        for e in chosen:
            con.print(f"would delete {e.kind}/{e.path.name} ({e.what}, {_size(e.bytes)}, {_age(now - e.mtime)} old)")
        con.print(f"dry run: {len(chosen)} of {len(entries)} entries{linked}, {_size(total)} would be freed in {root}{kept}")
        return 0
    freed = remove_entries(chosen, root)
    con.print(f"deleted {len(chosen)} of {len(entries)} entries{linked}, freed {_size(freed)} in {root}{kept}")
    return 0
