"""Does a multilingual world source use the translation? Masked-token loss with and without it.

For each target language, held-out translation pairs (the world's ``translation`` test split, never
seen in pretraining: TLM reads the ``gold/parallel.jsonl`` train lines) are scored twice by a plain
(``encoding: none``) world source: the masked tokens of one side alone (MLM), and the same masks with the
other side's sentence unmasked in front of it (TLM, ``<s> other </s><s> side </s>`` as the pretraining
packs a pair). A model that aligned the languages predicts a masked word far better from its translation;
``gain = loss alone - loss with translation`` (nats per masked token) is how much it does. Masks: 15 % of
each side's non-special tokens (at least one), all replaced by ``<mask>``, drawn once from ``--seed``,
identical in both conditions. Positions follow the source's TLM layout: numbered on across the two
sentences (``tlm_style: packed``) or restarting at the second (``xlm``). Both directions: the target side given the source sentence, and the
source side given the target sentence. A copy control (``copy``: a source sentence given itself,
unmasked) asks whether the model retrieves from its context at all.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/probe_tlm_gap.py --source ~/.cache/tokxfer/sources/0a87b4825ed7e259fa34 \\
        --out benchmarks/results/xlp_tlm_gap_tlm2000.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.world.pretrain_model import token_loss  # noqa: E402
from harness.world.tlm import restarted_positions  # noqa: E402


def read_pairs(path: Path, lang: str, source_lang: str, limit: int) -> list[tuple[str, str]]:
    """``(target sentence, source sentence)`` pairs of a world ``translation`` file; names the line that is not one."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                row = json.loads(line)["translation"]
                pairs.append((str(row[lang]), str(row[source_lang])))
            except (ValueError, KeyError, TypeError):
                raise SystemExit(f"{path}: line {n} is not {{'translation': {{{lang!r}: ..., {source_lang!r}: ...}}}}") from None
            if len(pairs) == limit:
                break
    return pairs


def masked(ids: list[int], specials: set[int], mask_id: int, gen: torch.Generator, p: float = 0.15) -> tuple[list[int], list[int]]:
    """``(inputs, labels)`` with ``p`` of the non-special tokens (at least one) masked; labels -100 elsewhere."""
    cand = [i for i, t in enumerate(ids) if t not in specials]
    k = max(1, round(p * len(cand)))
    chosen = {cand[j] for j in torch.randperm(len(cand), generator=gen)[:k].tolist()}
    return ([mask_id if i in chosen else t for i, t in enumerate(ids)],
            [t if i in chosen else -100 for i, t in enumerate(ids)])  # fmt: skip


@torch.no_grad()
def side_loss(model, rows: list[tuple[list[int], list[int], list[int]]], pad_id: int, batch: int = 64) -> tuple[float, int]:
    """Token-weighted masked loss over ``[(inputs, labels, side starts)]`` (a side's positions restart at its
    start; ``[0]``: one numbering): ``(nats per masked token, masked tokens)``."""
    total, count = 0.0, 0
    for a in range(0, len(rows), batch):
        chunk = rows[a : a + batch]
        width = max(len(x) for x, _, _ in chunk)
        ids = torch.full((len(chunk), width), pad_id)
        labels = torch.full((len(chunk), width), -100)
        attn = torch.zeros((len(chunk), width), dtype=torch.long)
        sides = []
        for r, (x, y, starts) in enumerate(chunk):
            ids[r, : len(x)], labels[r, : len(y)], attn[r, : len(x)] = torch.tensor(x), torch.tensor(y), 1
            sides.append([(s, 0) for s in starts])
        positions = restarted_positions(sides, [len(x) for x, _, _ in chunk], width, pad_id)
        n = int((labels != -100).sum())
        total += float(token_loss(model, "mlm", ids, labels, attn, position_ids=positions)) * n
        count += n
    return total / count, count


def probe_language(model, tok, pairs, seed: int, restart: bool = False) -> dict:
    """Both directions' losses alone and with the translation in front, for one language's pairs
    (``restart``: the positions restart at the second sentence, as ``tlm_style: xlm`` trained them)."""
    specials = set(tok.all_special_ids)
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, side_of, other_of in (("target", 0, 1), ("source", 1, 0)):
        alone, with_other = [], []
        for pair in pairs:
            side = tok(pair[side_of])["input_ids"]
            other = tok(pair[other_of])["input_ids"]
            x, y = masked(side, specials, tok.mask_token_id, gen)
            alone.append((x, y, [0]))
            with_other.append((other + x, [-100] * len(other) + y, [0, len(other)] if restart else [0]))
        a, n = side_loss(model, alone, tok.pad_token_id)
        b, _ = side_loss(model, with_other, tok.pad_token_id)
        out[name] = {"loss_alone": round(a, 4), "loss_with_translation": round(b, 4), "gain": round(a - b, 4),
                     "masked_tokens": n}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, type=Path, help="a cached plain (encoding none) world source directory")
    ap.add_argument("--world", type=Path, help="world directory (default: the one in the source's pretrain_info.json)")
    ap.add_argument("--languages", nargs="+", help="target languages (default: the source's extra languages)")
    ap.add_argument("--pairs", type=int, default=500, help="held-out pairs per language (translation test split)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the masks")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer, RobertaForMaskedLM

    info = json.loads((args.source / "pretrain_info.json").read_text())
    if (info.get("encoding") or {}).get("name", "none") != "none":
        raise SystemExit(f"{args.source}: encoding {info['encoding']['name']!r}; this probe reads plain (none) sources")
    world = args.world or Path(info["world"])
    langs = args.languages or info["config"].get("extra_languages") or []
    if not langs:
        raise SystemExit(f"{args.source}: no extra languages; pass --languages")
    restart = info["config"].get("tlm_style", "packed") == "xlm"
    torch.manual_seed(0)
    model = RobertaForMaskedLM.from_pretrained(args.source).eval()
    tok = AutoTokenizer.from_pretrained(args.source)
    t0 = time.perf_counter()
    results = {lang: probe_language(model, tok, read_pairs(world / lang / "translation" / "test.jsonl", lang,
                                                           info["source_language"], args.pairs), args.seed, restart)
               for lang in langs}  # fmt: skip
    first = read_pairs(world / langs[0] / "translation" / "test.jsonl", langs[0], info["source_language"], args.pairs)
    results["copy"] = probe_language(model, tok, [(s, s) for _, s in first], args.seed, restart)
    out = {"source": str(args.source), "source_dir": args.source.name, "world": str(world), "pairs": args.pairs,
           "seed": args.seed, "pretrain": {k: info["config"].get(k) for k in ("steps", "tlm_fraction", "tlm_style", "lr", "seed")},
           "positions": "restart at the second sentence" if restart else "one numbering",
           "dev_loss": info.get("dev_loss"), "final_tlm_loss": (info.get("tlm") or {}).get("final_loss"),
           "languages": results, "seconds": round(time.perf_counter() - t0, 1), "threads": torch.get_num_threads()}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for lang, r in results.items():
        print(f"{lang:8s} target side: alone {r['target']['loss_alone']:.3f}, with src {r['target']['loss_with_translation']:.3f} "
              f"(gain {r['target']['gain']:+.3f});  src side: alone {r['source']['loss_alone']:.3f}, with {lang} "
              f"{r['source']['loss_with_translation']:.3f} (gain {r['source']['gain']:+.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
