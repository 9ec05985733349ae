"""Every committed probe of the XLP grids' multilingual source in two tables: where each language stands.

The XLP issue's gate asks the ``none`` source to transfer XNLI from src to every other language (>= 50 %,
chance 33.3) or, for a language that cannot get there, a curve of where it stands and why. The probes that
searched for a source recipe were run one at a time (``benchmarks/probe_xlp.py``, seed-1 sources, loaded
machine) and committed as ``benchmarks/results/xlp_probe_*.json``. This script reads them and prints, per
source recipe, the zero-shot XNLI accuracy per language (mean over the fine-tuning seeds it has, n shown)
and the bitext retrieval accuracy per language (how well the source's sentence vectors of a target sentence
and its src translation find each other), so the comparison is one command, not prose::

    python benchmarks/xlp_probes.py            # markdown to stdout
    python benchmarks/xlp_probes.py --json out.json
    python benchmarks/xlp_probes.py --plot benchmarks/results/xlp_probes_transfer_vs_alignment.png

The plot is the gate's curve: zero-shot XNLI accuracy against bitext retrieval, one point per language and
recipe that has both (:func:`transfer_vs_alignment`), with chance and the gate (chance + 15 points) drawn.

Each probe is descriptive (one source seed, 1-3 fine-tuning seeds): no test, no claim. :data:`PROBES` names
which file holds which recipe (the probes' own command lines are in the files).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
LANGUAGES = ("src", "near", "agglu", "far", "script")

PROBES: list[tuple[str, str, tuple[str, ...]]] = [
    # (source recipe, XNLI fine-tuning, files): the recipe is the source's; files may hold retrieval and XNLI records
    ("packed TLM, 600 steps", "4k pairs x 2 epochs", ("xlp_probe_tlm600.json",)),
    ("packed TLM, 2000 steps", "12k x 3 epochs", ("xlp_probe_tlm2000.json", "xlp_probe_align_tlm2000.json")),
    ("packed TLM, 4000 steps", "12k x 3 epochs", ("xlp_probe_tlm4000.json",)),
    ("packed TLM, 2000 steps", "12k x 2 epochs, bf16", ("xlp_probe_xnli_fast_tlm2000.json", "xlp_probe_xnli_packed_ft23.json")),
    ("packed TLM, 2000 steps", "12k x 2 epochs, bf16, embeddings frozen", ("xlp_probe_xnli_freeze_tlm2000.json",)),
    ("packed TLM 90 %, bf16", "-", ("xlp_probe_align_tlm09_bf16.json",)),
    ("packed TLM, peak LR 1e-3, bf16", "-", ("xlp_probe_align_lr1e3_bf16.json",)),
    ("packed TLM + code-switching 0.3, bf16", "12k x 2 epochs, bf16", ("xlp_probe_xnli_cs03_bf16.json",)),
    ("packed TLM + code-switching 0.6, bf16", "12k x 2 epochs, bf16", ("xlp_probe_xnli_cs06_bf16.json",)),
    ("XLM-layout TLM, 2000 steps, bf16", "12k x 2 epochs, bf16",
     ("xlp_probe_xnli_xlm_bf16.json", "xlp_probe_xnli_xlm_bf16_ft23.json")),
]


class ProbeFileError(ValueError):
    """A listed probe file is missing or is not a ``benchmarks/probe_xlp.py`` result (the message names it)."""


def _records(files: tuple[str, ...], results: Path) -> list[dict]:
    out = []
    for name in files:
        path = results / name
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ProbeFileError(f"{path}: cannot read a probe result ({e})") from None
        if not isinstance(data, dict) or not isinstance(data.get("records"), list):
            raise ProbeFileError(f"{path}: expected a 'records' list (a benchmarks/probe_xlp.py result)")
        out += [r for r in data["records"] if r.get("status") == "ok"]
    return out


def summarize(results: Path = RESULTS) -> list[dict]:
    """One row per :data:`PROBES` entry: XNLI accuracy per language (mean, n) and retrieval accuracy per language."""
    rows = []
    for recipe, finetune, files in PROBES:
        recs = _records(files, results)
        xnli = {lang: [] for lang in LANGUAGES}
        for r in recs:
            if r.get("task") == "xnli-cross-lingual":
                for lang in LANGUAGES:
                    if lang in r["metrics"]:
                        xnli[lang].append(r["metrics"][lang]["accuracy"])
        retrieval = {lang: r["metrics"][lang]["accuracy"] for r in recs if r.get("task") == "bitext-retrieval"
                     for lang in r["metrics"] if lang in LANGUAGES}  # fmt: skip
        n = max((len(v) for v in xnli.values()), default=0)
        rows.append({"recipe": recipe, "finetune": finetune if n else "-", "files": list(files), "xnli_n": n,
                     "xnli": {k: round(100 * statistics.fmean(v), 1) for k, v in xnli.items() if v},
                     "retrieval": {k: round(100 * v, 1) for k, v in retrieval.items()}})
    return rows


def transfer_vs_alignment(rows: list[dict]) -> list[dict]:
    """``(recipe, language, retrieval %, XNLI %)`` of every recipe and target language that has both."""
    return [{"recipe": r["recipe"], "language": lang, "retrieval": r["retrieval"][lang], "xnli": r["xnli"][lang]}
            for r in rows for lang in LANGUAGES[1:] if lang in r["retrieval"] and lang in r["xnli"]]  # fmt: skip


def plot(points: list[dict], path: Path) -> Path:
    """Scatter of :func:`transfer_vs_alignment`'s points (a marker per language), chance and gate lines, to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for lang, marker in zip(LANGUAGES[1:], "osD^"):
        pts = [p for p in points if p["language"] == lang]
        ax.scatter([p["retrieval"] for p in pts], [p["xnli"] for p in pts], marker=marker, label=lang, s=36)
    ax.axhline(100 / 3, color="grey", lw=0.8, ls=":", label="chance (33.3)")
    ax.axhline(100 / 3 + 15, color="grey", lw=0.8, ls="--", label="gate (chance + 15)")
    ax.set_xlabel("bitext retrieval accuracy of the source (%)")
    ax.set_ylabel("zero-shot XNLI accuracy from src (%)")
    ax.set_title(f"XLP source probes: transfer vs alignment ({len({p['recipe'] for p in points})} recipes, seed 1)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(rows: list[dict]) -> str:
    def cell(d: dict, lang: str) -> str:
        return f"{d[lang]:.1f}" if lang in d else "–"

    out = ["| source recipe (seed 1) | XNLI fine-tuning | n | " + " | ".join(f"XNLI {lang}" for lang in LANGUAGES)
           + " | " + " | ".join(f"retrieval {lang}" for lang in LANGUAGES[1:]) + " |",
           "|:---|:---|---:|" + "---:|" * (2 * len(LANGUAGES) - 1)]
    for r in rows:
        out.append(f"| {r['recipe']} | {r['finetune']} | {r['xnli_n'] or '–'} | "
                   + " | ".join(cell(r["xnli"], lang) for lang in LANGUAGES) + " | "
                   + " | ".join(cell(r["retrieval"], lang) for lang in LANGUAGES[1:]) + " |")
    out.append("")
    out.append("XNLI: zero-shot accuracy (%) after fine-tuning on src, mean over the fine-tuning seeds (n; chance 33.3). "
               "Retrieval: bitext retrieval accuracy (%) of the source's sentence vectors, target vs its src translation. "
               "One source seed per recipe, loaded machine: descriptive, no test.")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="folder of the xlp_probe_*.json files")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    p.add_argument("--plot", type=Path, default=None, help="also draw XNLI transfer against retrieval per language here (PNG)")
    args = p.parse_args(argv)
    try:
        rows = summarize(args.results)
    except ProbeFileError as e:
        print(f"xlp_probes: {e}", file=sys.stderr)
        return 2
    print(markdown(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    if args.plot is not None:
        print(f"wrote {plot(transfer_vs_alignment(rows), args.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
