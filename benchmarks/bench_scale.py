"""Every registered method end to end at XLM-R scale: wall time, peak memory and the longest silence.

Each method runs as a user runs it, ``python -m harness.cli init --method M`` (what ``tokxfer init``
runs), in its own process with an empty ``TOKXFER_CACHE`` (cold: fastText, alignments and tokenizer
pre-tokenization are computed), on files this script builds under ``--work-dir`` (reused when the
same sizes were built before):

* a source model shaped like XLM-R base: a SentencePiece-Unigram vocabulary of ``--source-vocab``
  pieces (250,002 by default: ``<s> <pad> </s> <unk>`` at 0-3, the source language's own pieces from
  a Unigram trained on its text, about a third of the target's pieces, pieces of other pseudo-languages
  in three scripts, ``<mask>`` last; :func:`benchmarks._synthetic.xlmr_like_vocabulary`) and a
  one-layer XLM-R masked LM with ``--dim`` (768) embeddings;
* a target SentencePiece-Unigram tokenizer of ``--target-vocab`` pieces (50,000) trained on the
  target text;
* source and target text (a few MB each: FOCUS's auxiliary fastText, WECHSEL's word vectors), a
  parallel corpus of ``--pairs`` sentence pairs (Tik-to-Tok) and a bilingual dictionary (WECHSEL);
  :func:`benchmarks._synthetic.make_scale_texts`;
* a helper model in the target vocabulary (CLP's helper, OMP's ``donor: helper``): a 2-layer XLM-R
  encoder of width ``HELPER_MODEL["hidden"]`` (256) with the target tokenizer, random weights (timing
  only), built once next to the other files and added to a folder built before it existed.

A method gets the file inputs its configuration needs (:func:`harness.cli.init_flags.method_needs`
at the defaults plus :data:`SCALE_CONFIG`: the first input of each need that the work folder has),
or, for a method without declared needs, those it reads (:func:`harness.cli.init_flags.method_reads`),
so a plugin method registered with ``--plugin`` is benchmarked the same way. ``--methods`` takes
``NAME`` or ``NAME:KEY=VALUE:...`` (extra ``--config`` values, e.g. ``omp:donor=helper``); the
JSON records each run's ``config``. Per method the JSON records wall and
CPU seconds and peak RSS of the process (``wait4``), its exit status, the longest silence (the longest
gap between two pieces of output on its stderr/stdout — progress bars, fastText's progress line,
notes — counting the start and the exit) with the line before and after it, the method's own
timings from ``init_info.json``, and the load average before, during and after (:mod:`benchmarks._load`).
Targets (2 cores, idle): **no method over 5 minutes, none silent for more than 10 s**; the table marks each, and
marks the time target ``BUSY`` (not judged) for a method during which the load average exceeded the cores.

Run::

    python benchmarks/bench_scale.py --json benchmarks/results/scale_250k.json      # 250,002 x 50,000 (~1 h)
    python benchmarks/bench_scale.py --source-vocab 25000 --target-vocab 5000       # quick (~5 min)
    python benchmarks/bench_scale.py --methods tiktotok,focus --work-dir /tmp/scale  # some methods, files kept

Timings are results only on an idle machine (the load averages in the JSON say whether it was).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._load import LoadMonitor, banner, combine, load_average  # noqa: E402
from benchmarks.bench_quickstart import _git, machine_facts  # noqa: E402
from benchmarks.bench_quickstart import child_env as quickstart_env  # noqa: E402

TIME_TARGET_S = 300.0
"""A method's wall time on 2 idle cores, at most (issue 31)."""
SILENCE_TARGET_S = 10.0
"""The longest a method may print nothing, at most."""
INPUTS_VERSION = 2
"""Bumped when the built files change for the same arguments (the work folder is rebuilt)."""
BASE_INPUTS = ("source_model", "target_tokenizer", "target_corpus", "source_corpus", "parallel_corpus", "dictionary")
"""The files of :func:`build_inputs` proper (a change to them rebuilds the folder); extras are added apart."""
HELPER_MODEL = {"hidden": 256, "layers": 2, "heads": 4, "version": 1}
"""The helper model's shape (:func:`add_helper_model`); a change rebuilds only the helper."""
SCALE_CONFIG: dict[str, dict[str, Any]] = {"clp": {"top_k": 100}}
"""``--config`` values a method runs with here. CLP's default dense average over every overlap token would
hold ~33k new x ~17k overlap tokens = 5.6e8 weights at 250k x 50k, past its ``max_dense_weights`` (it
refuses and names ``top_k``); the benchmark runs the reference code's nearest-neighbour reading with 100."""
FASTTEXT_START = re.compile(r"^(Number of (words|labels)|Read \d+M words)")
"""fastText's own lines before it trains (its progress line comes when training ends; issue 32 adds a heartbeat)."""


# ------------------------------------------------------------------------------------------ sizes


@dataclass(frozen=True)
class Sizes:
    """What the inputs are built for (defaults: XLM-R base against a 50k target vocabulary)."""

    source_vocab: int = 250_002
    target_vocab: int = 50_000
    dim: int = 768
    lines: int | None = None
    """Sentences of each monolingual text; default ``min(2 * target_vocab, 100_000)``, at least 600; for a
    target vocabulary above 50k, ``3 * target_vocab`` (100k lines support only ~74k unigram pieces of a
    1.2 x 128k-word lexicon: the tokenizer trainer refuses a 128k vocabulary on them)."""
    pairs: int | None = None
    """Parallel sentence pairs; default ``min(0.8 * target_vocab, 40_000)``, at least 400."""
    dictionary: int = 5000
    seed: int = 0

    def resolved(self) -> dict:
        d = dict(self.__dict__)
        big = self.target_vocab > 50_000
        d["lines"] = self.lines or (3 * self.target_vocab if big else max(min(2 * self.target_vocab, 100_000), 600))
        d["pairs"] = self.pairs or max(min(int(0.8 * self.target_vocab), 40_000), 400)
        d["target_words"] = max(int(1.2 * self.target_vocab), 1000)
        d["language_vocab"] = max(min(self.source_vocab // 6, 40_000), 300)
        d["version"] = INPUTS_VERSION
        return d


def build_inputs(work: Path, sizes: Sizes) -> dict:
    """Build (or reuse) the files under ``work``; return the manifest (paths and achieved sizes)."""
    want = sizes.resolved()
    manifest = work / "manifest.json"
    if manifest.is_file():
        old = json.loads(manifest.read_text())
        if old.get("inputs") == want and all(Path(old["paths"][k]).exists() for k in BASE_INPUTS):
            return add_helper_model(work, old, sizes)
    import numpy as np
    import torch
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast, XLMRobertaConfig, XLMRobertaForMaskedLM
    from transformers.utils import logging as hf_logging

    from benchmarks._synthetic import make_scale_texts, xlmr_like_vocabulary
    from harness.tokenizers import train_tokenizer

    hf_logging.set_verbosity_error()
    t0 = time.perf_counter()
    work.mkdir(parents=True, exist_ok=True)
    texts = make_scale_texts(work / "text", n_target_words=want["target_words"], n_lines=want["lines"],
                             n_pairs=want["pairs"], n_dictionary=want["dictionary"], seed=sizes.seed)  # fmt: skip
    cache = work / "build-cache"
    tgt = train_tokenizer([texts.target], "unigram", vocab_size=sizes.target_vocab, cache_dir=cache)
    lang = train_tokenizer([texts.source], "unigram", vocab_size=want["language_vocab"], cache_dir=cache)
    tgt_dir, src_dir = work / "target-tokenizer", work / "source-model"
    tgt.save_pretrained(tgt_dir)
    t1 = time.perf_counter()

    def pieces(tok: Any) -> list[tuple[str, float]]:
        return [(p, float(s)) for p, s in json.loads(tok.backend_tokenizer.to_str())["model"]["vocab"]]

    vocab = xlmr_like_vocabulary(pieces(lang), pieces(tgt), sizes.source_vocab, sizes.seed)
    cfg = json.loads(lang.backend_tokenizer.to_str())
    cfg["model"]["vocab"] = [[p, s] for p, s in vocab]
    ids = {p: i for i, (p, _) in enumerate(vocab)}
    for a in cfg["added_tokens"]:
        a["id"] = ids[a["content"]]
    src = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(cfg)), bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        pad_token="<pad>", cls_token="<s>", sep_token="</s>",
        mask_token=AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False, special=True),
        clean_up_tokenization_spaces=False,
    )  # fmt: skip
    if len(src) != sizes.source_vocab or src.mask_token_id != sizes.source_vocab - 1:
        raise RuntimeError(f"source tokenizer has {len(src)} tokens (mask {src.mask_token_id}), expected {sizes.source_vocab}")
    config = XLMRobertaConfig(
        vocab_size=sizes.source_vocab, hidden_size=sizes.dim, num_hidden_layers=1, num_attention_heads=max(sizes.dim // 64, 1),
        intermediate_size=4 * sizes.dim, max_position_embeddings=514, type_vocab_size=1, pad_token_id=src.pad_token_id,
        bos_token_id=src.bos_token_id, eos_token_id=src.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(sizes.seed)
    model = XLMRobertaForMaskedLM(config)
    rng = np.random.default_rng(sizes.seed)
    emb = rng.standard_normal((sizes.source_vocab, sizes.dim), dtype=np.float32)
    emb *= np.float32(0.05)
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(torch.from_numpy(emb))
    del emb
    model.save_pretrained(src_dir)
    src.save_pretrained(src_dir)
    del model
    shutil.rmtree(cache, ignore_errors=True)
    overlap = len(set(src.get_vocab()) & set(tgt.get_vocab()))
    info = {
        "inputs": want,
        "build_s": {"texts_and_tokenizers": round(t1 - t0, 1), "total": round(time.perf_counter() - t0, 1)},
        "paths": {"source_model": str(src_dir), "target_tokenizer": str(tgt_dir), "target_corpus": str(texts.target),
                  "source_corpus": str(texts.source), "parallel_corpus": str(texts.parallel),
                  "dictionary": str(texts.dictionary)},
        "sizes": {"n_source": len(src), "n_target": len(tgt), "dim": sizes.dim, "shared_pieces": overlap,
                  "language_pieces": len(lang),
                  "source_text_mb": round(texts.source.stat().st_size / 2**20, 2),
                  "target_text_mb": round(texts.target.stat().st_size / 2**20, 2),
                  "parallel_mb": round(texts.parallel.stat().st_size / 2**20, 2), "pairs": want["pairs"],
                  "dictionary_pairs": sum(1 for _ in open(texts.dictionary, encoding="utf-8"))},
    }  # fmt: skip
    manifest.write_text(json.dumps(info, indent=1))
    return add_helper_model(work, info, sizes)


def add_helper_model(work: Path, info: dict, sizes: Sizes) -> dict:
    """Add (or reuse) the helper model under ``work/helper-model`` to the manifest ``info``; return it.

    A 2-layer XLM-R encoder in the target vocabulary (:data:`HELPER_MODEL`) with the target tokenizer
    saved beside it, random weights from ``sizes.seed``: shaped like a small target-language model
    (what CLP and OMP's helper donor read is its embedding matrix), not trained.
    """
    spec = {**HELPER_MODEL, "vocab": sizes.target_vocab, "seed": sizes.seed}
    path = work / "helper-model"
    have = (info.get("extras") or {}).get("helper_model") or {}
    if have.get("spec") == spec and (path / "config.json").is_file():
        info["paths"]["helper_model"] = str(path)
        return info
    import torch
    from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(info["paths"]["target_tokenizer"])
    config = XLMRobertaConfig(
        vocab_size=len(tok), hidden_size=spec["hidden"], num_hidden_layers=spec["layers"],
        num_attention_heads=spec["heads"], intermediate_size=4 * spec["hidden"], max_position_embeddings=514,
        type_vocab_size=1, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(sizes.seed)
    model = XLMRobertaModel(config, add_pooling_layer=False)
    tmp = work / "helper-model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    info["paths"]["helper_model"] = str(path)
    info.setdefault("extras", {})["helper_model"] = {"spec": spec, "build_s": round(time.perf_counter() - t0, 1)}
    info["sizes"]["helper_model"] = {"vocab": len(tok), "hidden": spec["hidden"], "layers": spec["layers"]}
    from harness.files import write_atomic

    write_atomic(work / "manifest.json", json.dumps(info, indent=1))
    return info


# ------------------------------------------------------------------------------------------ running


@dataclass
class Output:
    """What a child printed: every arrival of output (a pipe read) with its time (seconds since the
    start) and the line on screen then, and the complete lines (``\\r`` or ``\\n`` ended)."""

    events: list[tuple[float, str]] = field(default_factory=list)
    lines: list[tuple[float, str]] = field(default_factory=list)
    partial: str = ""

    def add(self, t: float, chunk: str) -> None:
        segs = re.split(r"[\r\n]", self.partial + chunk)  # a write may end mid-line (fastText: "labels: " + "0")
        self.partial = segs[-1]
        done = [x.strip() for x in segs[:-1] if x.strip()]
        self.lines += [(t, x) for x in done]
        shown = self.partial.strip() or (done[-1] if done else (self.events[-1][1] if self.events else ""))
        self.events.append((t, shown))

    def silences(self, end: float, n: int | None = 5) -> list[dict]:
        """The ``n`` longest gaps between two outputs (the start and ``end`` count as outputs), longest
        first, each with the line on screen before and after it and whether it is fastText training's
        own (it starts after fastText's ``Number of labels`` line: its progress line comes only at the end)."""
        times = [0.0] + [t for t, _ in self.events] + [end]
        texts = ["(start)"] + [s for _, s in self.events] + ["(exit)"]
        order = sorted(range(len(times) - 1), key=lambda i: times[i] - times[i + 1])[:n]
        return [{"seconds": round(times[k + 1] - times[k], 2), "at_s": round(times[k], 2), "after": texts[k][:200],
                 "before": texts[k + 1][:200], "fasttext_training": bool(FASTTEXT_START.match(texts[k]))}
                for k in order]  # fmt: skip

    def longest_silence(self, end: float) -> dict:
        """The longest gap between two outputs (the start and ``end`` count as outputs), and around it."""
        return self.silences(end, 1)[0]


def rss_floor_gb() -> float:
    """This process's own peak RSS (GiB): the least peak RSS ``wait4`` reports for a child it starts now.

    Linux carries a process's peak RSS across ``fork`` and ``exec`` (the larger of the parent's high-water mark
    and the child's own), so a benchmark that holds gigabytes itself would report them as every child's peak.
    The benchmarks build their inputs in a child (:func:`build_inputs_isolated`) and record this floor beside
    each measurement (``rss_floor_gb``; ``peak_rss_floor_bound``: the figure may be the floor, not the child's).
    """
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30, 3)


def build_inputs_isolated(work: Path, sizes: Sizes) -> dict:
    """:func:`build_inputs` in a child process, so that this process stays small (see :func:`rss_floor_gb`)."""
    import dataclasses

    result = work.parent / f".{work.name}.built.json"
    work.parent.mkdir(parents=True, exist_ok=True)
    code = ("import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "from benchmarks.bench_scale import Sizes, build_inputs; a = json.loads(sys.argv[2]); "
            "Path(a['out']).write_text(json.dumps(build_inputs(Path(a['work']), Sizes(**a['sizes']))))")
    args = {"work": str(work), "sizes": dataclasses.asdict(sizes), "out": str(result)}
    try:
        subprocess.run([sys.executable, "-c", code, str(ROOT), json.dumps(args)], cwd=ROOT, check=True)
        return json.loads(result.read_text())
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"building the inputs in {work} failed (exit {e.returncode}); its output is above") from None
    finally:
        result.unlink(missing_ok=True)


def run_child(cmd: list[str], env: dict, log: Path, timeout: float) -> dict:
    """Run ``cmd``, timestamping its output; wall and CPU seconds, peak RSS (``wait4``; ``rss_floor_gb`` is the
    least it can be, :func:`rss_floor_gb`), the longest silence."""
    out = Output()
    floor = rss_floor_gb()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    fd = proc.stdout.fileno()

    def read() -> None:
        with open(log, "wb") as f:
            while chunk := os.read(fd, 1 << 16):
                f.write(chunk)
                f.flush()  # readable while the child runs
                out.add(time.perf_counter() - t0, chunk.decode("utf-8", errors="replace"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    timed_out = False

    def kill() -> None:
        nonlocal timed_out
        timed_out = True
        os.killpg(proc.pid, 9)

    timer = threading.Timer(timeout, kill)
    timer.start()
    _, status, usage = os.wait4(proc.pid, 0)
    end = time.perf_counter() - t0
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; Popen must not wait again
    reader.join(timeout=10)
    proc.stdout.close()
    peak = usage.ru_maxrss * 1024 / 2**30
    return {
        "exit": proc.returncode, "timed_out": timed_out, "wall_s": round(end, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "peak_rss_gb": round(peak, 3),
        "rss_floor_gb": floor, "peak_rss_floor_bound": peak <= floor + 0.01,
        "longest_silence": out.longest_silence(end), "silences": out.silences(end),
        "longest_silence_outside_fasttext_training": next(
            (g for g in out.silences(end, None) if not g["fasttext_training"]), None),
        "output_lines": len(out.lines),
        "last_output": out.lines[-1][1][:300] if out.lines else None,
    }  # fmt: skip


def child_env(threads: int, cache: Path) -> dict:
    """:func:`benchmarks.bench_quickstart.child_env` (this checkout first, offline, ``threads`` for every
    pool, ``cache`` as ``TOKXFER_CACHE``) with progress bars on and unbuffered output."""
    env = quickstart_env(cache, threads)
    env.pop("TQDM_DISABLE", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def parse_method(spec: str) -> tuple[str, dict[str, Any]]:
    """``NAME`` or ``NAME:KEY=VALUE:...`` -> ``(name, config values)``; values are JSON where they parse, else strings.

    Example:
        >>> parse_method("omp:donor=helper:k=4")
        ('omp', {'donor': 'helper', 'k': 4})
    """
    name, *items = spec.split(":")
    values: dict[str, Any] = {}
    for item in items:
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--methods {spec!r}: expected NAME:KEY=VALUE, got {item!r}")
        try:
            values[key.strip()] = json.loads(text)
        except json.JSONDecodeError:
            values[key.strip()] = text
    return name.strip(), values


def method_config(spec: str) -> tuple[str, dict[str, Any]]:
    """The method of ``spec`` and the config values it runs with: :data:`SCALE_CONFIG`, then the spec's own."""
    name, values = parse_method(spec)
    return name, {**SCALE_CONFIG.get(name, {}), **values}


def method_inputs(method: str, values: dict[str, Any], paths: dict) -> list[str]:
    """The input fields ``method`` gets: for each of its needs that holds at ``values`` (over the config's
    defaults) the first input ``paths`` has; a method without declared needs, every input it reads."""
    from harness import registry
    from harness.cli.init_flags import method_needs, method_reads

    entry = registry.get("method", method)
    needs = method_needs(method)
    if needs is None:
        return [f for f in method_reads(entry.cls) if f in paths]
    cfg = registry.build_config(entry.config_cls, values, where=f"--methods {method}")
    picked = [next((i for i in n.inputs if i in paths), None) for n in needs if n.applies(cfg)]
    return list(dict.fromkeys(i for i in picked if i is not None))


def init_command(spec: str, paths: dict, out: Path, seed: int, plugins: list[str]) -> list[str]:
    """``python -m harness.cli init`` for the method of ``spec`` (:func:`parse_method`) with the file inputs
    its configuration needs (:func:`method_inputs`) and its config values (:func:`method_config`)."""
    from harness.cli.init_flags import INPUT_BY_FIELD

    method, values = method_config(spec)
    cmd = [sys.executable, "-m", "harness.cli", "init", "--method", method, "--source", paths["source_model"],
           "--target-tokenizer", paths["target_tokenizer"], "--seed", str(seed), "--out", str(out), "--overwrite"]  # fmt: skip
    for p in plugins:
        cmd += ["--plugin", p]
    for name in method_inputs(method, values, paths):
        cmd += [INPUT_BY_FIELD[name].flag, paths[name]]
    if values:
        cmd += ["--config", *(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in values.items())]
    return cmd


def method_timings(out: Path) -> dict | None:
    """The method's own timings from ``init_info.json`` (``info.timings``, and the command's ``timings``)."""
    path = out / "init_info.json"
    if not path.is_file():
        return None
    info = json.loads(path.read_text())
    return {"init": info.get("timings"), "method": (info.get("info") or {}).get("timings")}


def benchmark(args: argparse.Namespace) -> dict:
    """Build the inputs, run every method, return the JSON record."""
    from harness import registry

    registry.load_builtins()
    for p in args.plugin:
        registry.load_plugin(p)
    methods = args.methods or registry.names("method")
    unknown = [m for m in methods if method_config(m)[0] not in registry.names("method")]
    if unknown:
        raise SystemExit(f"--methods: unknown {unknown}; registered: {', '.join(registry.names('method'))}")
    sizes = Sizes(args.source_vocab, args.target_vocab, args.dim, args.lines, args.pairs, args.dictionary, args.seed)
    tmp = None
    if args.work_dir is None:
        tmp = tempfile.mkdtemp(prefix="bench-scale-")
    work = Path(args.work_dir or tmp)
    try:
        print(f"building inputs in {work} ({sizes.source_vocab:,} x {sizes.target_vocab:,}, dim {sizes.dim}) ...", flush=True)
        t0 = time.perf_counter()
        files = build_inputs_isolated(work, sizes)  # in a child: this process stays small (rss_floor_gb)
        print(f"  inputs ready in {time.perf_counter() - t0:.1f} s: {json.dumps(files['sizes'])}", flush=True)
        (work / "logs").mkdir(exist_ok=True)
        results: dict[str, Any] = {}
        load_start, git = load_average(), _git()  # the code the methods run is the code at the start
        for m in methods:
            slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", m)
            out = work / "out" / slug
            cache = Path(tempfile.mkdtemp(prefix=f"cache-{slug}-", dir=work))
            cmd = init_command(m, files["paths"], out, args.seed, args.plugin)
            print(f"running {m} ...", flush=True)
            with LoadMonitor() as mon:
                res = run_child(cmd, child_env(args.threads, cache), work / "logs" / f"{slug}.log", args.timeout)
            load = mon.record()
            res.update(load_avg_before=load["before"], load_avg_after=load["after"], load=load, timings=method_timings(out),
                       command=["tokxfer", *cmd[3:]], config=method_config(m)[1])  # fmt: skip
            res["time_target_met"] = None if load["busy"] else res["exit"] == 0 and res["wall_s"] <= TIME_TARGET_S
            res["silence_target_met"] = res["exit"] == 0 and res["longest_silence"]["seconds"] <= SILENCE_TARGET_S
            other = res["longest_silence_outside_fasttext_training"]
            res["silence_target_met_outside_fasttext_training"] = res["exit"] == 0 and other["seconds"] <= SILENCE_TARGET_S
            results[m] = res
            shutil.rmtree(cache, ignore_errors=True)
            if not args.keep_outputs:
                shutil.rmtree(out, ignore_errors=True)
            status = "ok" if res["exit"] == 0 else ("TIMED OUT" if res["timed_out"] else f"FAILED (exit {res['exit']})")
            print(f"  {status}: {res['wall_s']} s, peak RSS {res['peak_rss_gb']} GB, longest silence "
                  f"{res['longest_silence']['seconds']} s after {res['longest_silence']['after']!r}", flush=True)  # fmt: skip
            if res["exit"] != 0:
                print(f"  last output: {res['last_output']}", flush=True)
        return {
            "bench": "scale", "sizes": files["sizes"], "inputs": files["inputs"], "build_s": files["build_s"],
            "threads": args.threads, "timeout_s": args.timeout, "targets": {"wall_s": TIME_TARGET_S, "silence_s": SILENCE_TARGET_S},
            "load_avg_start": load_start, "load_avg_end": load_average(), "machine": machine_facts(), "git": git,
            "load": combine([r["load"] for r in results.values()]), "methods": results,
        }  # fmt: skip
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def table(record: dict) -> str:
    """The result as a Markdown table (one row per method)."""
    rows = ["| method | wall s | CPU s | peak RSS GB | longest silence s (after) | outside fastText training s (after) "
            "| load avg before → after (max) | ≤ 5 min | silence ≤ 10 s |", "|---|---:|---:|---:|---|---|---|---|---|"]  # fmt: skip

    def gap(g: dict | None) -> str:
        return "-" if g is None else f"{g['seconds']:.1f} (`{g['after'][:50].replace('|', '/')}`)"

    for m, r in record["methods"].items():
        status = "" if r["exit"] == 0 else (" (timed out)" if r["timed_out"] else f" (exit {r['exit']})")
        load = f"{(r['load_avg_before'] or ['?'])[0]} → {(r['load_avg_after'] or ['?'])[0]} (max {r['load']['max_1min']})"
        rows.append(f"| {m}{status} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['peak_rss_gb']:.2f} | "
                    f"{gap(r['longest_silence'])} | {gap(r['longest_silence_outside_fasttext_training'])} | {load} | "
                    f"{({True: 'yes', False: 'NO', None: 'BUSY'})[r['time_target_met']]} | "
                    f"{'yes' if r['silence_target_met'] else 'NO'} |")  # fmt: skip
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source-vocab", type=int, default=250_002, help="source vocabulary size (default 250,002, XLM-R)")
    p.add_argument("--target-vocab", type=int, default=50_000, help="target vocabulary size (default 50,000)")
    p.add_argument("--dim", type=int, default=768, help="source embedding size (default 768)")
    p.add_argument("--lines", type=int, default=None, help="sentences per monolingual text (default from --target-vocab)")
    p.add_argument("--pairs", type=int, default=None, help="parallel sentence pairs (default from --target-vocab, 40,000 at most)")
    p.add_argument("--dictionary", type=int, default=5000, help="bilingual dictionary pairs (default 5,000)")
    p.add_argument("--methods", type=lambda s: [m.strip() for m in s.split(",") if m.strip()], default=None,
                   help="comma-separated methods, each NAME or NAME:KEY=VALUE:... (extra --config values; "
                        "default: every registered method)")  # fmt: skip
    p.add_argument("--plugin", action="append", default=[], help="a Python file registering extra methods (repeatable)")
    p.add_argument("--threads", type=int, default=2, help="BLAS/OpenMP threads of each method's process (default 2)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds after which a method is killed (default 1800)")
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs and of every method")
    p.add_argument("--work-dir", type=Path, default=None, help="where inputs are built (reused) and logs kept; default a temporary folder")
    p.add_argument("--keep-outputs", action="store_true", help="keep each method's output model under --work-dir/out")
    p.add_argument("--json", type=Path, default=None, help="write the result here (e.g. benchmarks/results/scale_250k.json)")
    args = p.parse_args(argv)
    for name in ("source_vocab", "target_vocab", "dim", "threads", "dictionary"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.target_vocab < 300 or args.source_vocab < 2 * args.target_vocab:
        p.error(f"--target-vocab must be >= 300 and --source-vocab >= 2 x --target-vocab, got {args.source_vocab} x {args.target_vocab}")
    record = benchmark(args)
    md = table(record)
    print("\n" + md)
    print("\n" + banner(record["load"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({**record, "table": md}, indent=1) + "\n")
        os.replace(tmp, args.json)
        print(f"\nresult: {args.json}")
    failed = [m for m, r in record["methods"].items() if r["exit"] != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
