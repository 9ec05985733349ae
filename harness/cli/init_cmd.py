"""``tokxfer init``: initialize a source model's embeddings for a new tokenizer, from local files.

The command line (:func:`add_arguments`), the explanation of a method (:func:`explain`), the
input checks that run *before* the source model is loaded (flags and numbers, files, the method's
config, tokenizers, then the method's ``preflight``), the provenance written to ``init_info.json``
and the one summary printed at the end (:func:`run`). Every message names the flags the user typed.
Progress goes through :mod:`harness.progress`: bars on a terminal, plain lines in a log, and the
heartbeat of steps that report nothing themselves (fastText training).

Inputs. Every file a method can read has a flag; three method options that name inputs have one too
(``--aux-model``, ``--english-tokenizer``, ``--source-tokens``); which method needs which input, and
when, and ``--explain``'s text: :mod:`harness.cli.init_flags`.

Checks of the inputs and the provenance categories of the summary: :mod:`harness.cli.init_checks`
(two-column files put the target language first; swapped columns are an error, never a silent
swap). ``tokxfer tokenizer train`` and ``tokxfer cache``: :mod:`harness.cli.tools`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.cli.init_checks import InitInputError, Notes, corpus_vocabulary, prepare_dictionary, prepare_parallel
from harness.cli.init_flags import (
    CONFIG_FLAGS,
    INPUT_BY_FIELD,
    INPUT_FLAGS,
    _config_has,
    _default,
    _flag_of,
    explain,
    flag_wording,
    method_needs,
    method_reads,
    need_condition,
)
from harness.extension import DEFAULT_EXTEND_TOP_N
from harness.model.heads import HeadError, missing_head
from harness.model.provenance import MAX_RANDOM_ROWS, PROVENANCE_CATEGORIES, provenance_summary, random_rows_warning
from harness.protocols import Need

__all__ = ["INPUT_FLAGS", "CONFIG_FLAGS", "PROVENANCE_CATEGORIES", "InitInputError", "add_arguments",
           "explain", "flag_wording", "method_needs", "method_reads", "missing_inputs", "run"]

log = logging.getLogger("tokxfer.init")

INIT_INFO_VERSION = 3
"""Version of the ``init_info.json`` layout (1: counts, info and provenance only; 2: adds the provenance
of a trial record — versions, git, inputs with hashes, timings, warnings, new head, categories; 3: adds
``random_rows``, the random rows by reason with the ``--max-random-rows`` threshold, and writes text as UTF-8)."""


# --------------------------------------------------------------------------------------------
# the command line


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The flags of ``tokxfer init`` (every input a method can take, with its format)."""
    sp.formatter_class = argparse.RawDescriptionHelpFormatter
    sp.description = (
        "Initialize the embeddings of --source for --target-tokenizer with one method and save the model\n"
        "(a Hugging Face directory that AutoModel loads) plus init_info.json (provenance) in --out.\n"
        "`tokxfer init --method M --explain` prints what M needs, its options and defaults.\n"
        "Inputs are checked before the model is loaded; swapped dictionary or parallel columns are an error."
    )
    sp.add_argument("--method", required=True, help="initialization method (`tokxfer ls methods`)")
    sp.add_argument("--explain", action="store_true", help="print what --method needs, its options with defaults "
                    "and the paper behind them, then exit")
    sp.add_argument("--source", help="source model: a directory written by save_pretrained, or a hub id")
    sp.add_argument("--source-tokenizer", default=None, help="source tokenizer (default: the one in --source)")
    sp.add_argument("--target-tokenizer", help="the new tokenizer: a directory (see `tokxfer tokenizer train`) or hub id")
    g = sp.add_argument_group("method inputs (which method needs which: --explain)")
    for f in INPUT_FLAGS:
        g.add_argument(f.flag, default=None, metavar=f.metavar, help=f.help)
    for c in CONFIG_FLAGS:
        g.add_argument(c.flag, default=None, metavar=c.metavar if not c.choices else None, choices=c.choices, help=c.help)
    g.add_argument("--swap-dictionary", action="store_true",
                   help="--dictionary has the source word first (SOURCE<TAB>TARGET, as WECHSEL's reference files)")
    g.add_argument("--swap-parallel", action="store_true",
                   help="--parallel-corpus has its sides the other way round (TSV SOURCE<TAB>TARGET, or JSON fields swapped)")
    g = sp.add_argument_group("model")
    g.add_argument("--kind", default="mlm", choices=["mlm", "clm"], help="the source's head: masked or causal LM (default mlm)")
    g.add_argument("--new-head", action="store_true", help="accept a source checkpoint without the --kind head "
                   "(e.g. a plain encoder): the head is initialized at random from --seed and init_info.json says so")
    g.add_argument("--mode", default="replace", choices=["replace", "extend"],
                   help="replace the vocabulary (default), or extend the source vocabulary with target tokens")
    g.add_argument("--extend-top-n", type=int, default=DEFAULT_EXTEND_TOP_N, help="--mode extend: how many target tokens to add")
    g.add_argument("--bias", default="map", choices=["map", "zero", "keep"], help="the MLM output bias of new tokens")
    g.add_argument("--seed", type=int, default=1, help="seed of every random number, an integer >= 0 (default 1)")
    g.add_argument("--config", nargs="*", metavar="KEY=VALUE", help="method options (see --explain), e.g. k=10 temperature=0.1")
    sp.add_argument("--plugin", action="append", help="Python file registering extra methods")
    sp.add_argument("--out", help="output directory (new or empty, unless --overwrite)")
    sp.add_argument("--overwrite", action="store_true", help="write into a non-empty --out directory")
    sp.add_argument("--max-random-rows", type=float, default=MAX_RANDOM_ROWS, metavar="SHARE",
                    help="warn when more than this share (0 to 1) of the target rows is random, whatever the method "
                    f"(default {MAX_RANDOM_ROWS:g}); recorded in init_info.json")
    sp.add_argument("--quiet", action="store_true", help="no notes or progress (warnings and the summary still print)")


# --------------------------------------------------------------------------------------------
# messages


# --------------------------------------------------------------------------------------------
# checks


def _existing_file(value: str | None, flag: str) -> Path | None:
    if value is None:
        return None
    p = Path(value).expanduser()
    if not p.exists():
        raise InitInputError(f"{flag} {value}: file not found")
    if not p.is_file():
        raise InitInputError(f"{flag} {value}: not a file")
    if p.stat().st_size == 0:
        raise InitInputError(f"{flag} {value}: the file is empty")
    return p.resolve()


def _existing_model_dir(value: str | None, flag: str) -> Path | None:
    if value is None:
        return None
    from harness import inputs

    try:
        inputs.check_model_dir(value, field=flag)
    except inputs.InputFileError as e:
        raise InitInputError(str(e)) from None
    p = Path(value).expanduser()
    if not p.is_dir():
        raise InitInputError(f"{flag} {value}: not found (a local model directory was meant)")
    return p.resolve()


def missing_inputs(name: str, cfg: Any, given: set[str], typed: dict[str, str] | None = None,
                   needs: tuple[Need, ...] | None = None) -> list[str]:
    """One message per unmet requirement of method ``name`` under ``cfg`` (empty: all met).

    ``given``: the input and config fields that have a value; ``typed``: how the user spelled the
    options they set (``{"source_tokens": "--source-tokens english-only"}``), so a condition is told in
    the user's own words; ``needs``: only these requirements (default: all the method declares, :func:`method_needs`).
    """
    from harness import registry

    declared = method_needs(name)
    cfg_cls = registry.get("method", name).config_cls if declared is not None else type(cfg)
    out = []
    for n in (declared or ()) if needs is None else needs:
        if not n.applies(cfg) or any(i in given for i in n.inputs):
            continue
        alts = " or ".join(_flag_of(i) for i in n.inputs)
        cond = f" with {need_condition(n, cfg_cls, typed)}" if n.when else ""
        out.append(f"--method {name}{cond} needs {alts}: {n.why}")
    return out


# --------------------------------------------------------------------------------------------
# provenance of inputs


def _input_record(p: Path, flag: str) -> dict:
    from harness.cache import file_hash

    return {"flag": flag, "path": str(Path(p).resolve()), "bytes": Path(p).stat().st_size, "sha256": file_hash(p)}


def _model_record(name: str, flag: str) -> dict:
    """Absolute path and content hash of a model/tokenizer directory; a hub id as given (with its cached revision)."""
    from harness.cache import content_hash

    p = Path(name).expanduser()
    if p.is_dir():
        files = sorted(q for q in p.rglob("*") if q.is_file())
        return {"flag": flag, "path": str(p.resolve()), "bytes": sum(q.stat().st_size for q in files),
                "sha256": content_hash(p), "hash_of": "every file in the directory (relative path + contents)"}
    return {"flag": flag, "hub_id": name}


# --------------------------------------------------------------------------------------------
# the command


def _config_values(args: argparse.Namespace, cfg_cls: type, method: str) -> dict:
    import yaml

    values: dict[str, Any] = {}
    for item in args.config or []:
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise InitInputError(f"--config {item!r}: expected KEY=VALUE")
        try:
            values[k.strip()] = yaml.safe_load(v)
        except yaml.YAMLError as e:
            raise InitInputError(f"--config {item!r}: value is not valid YAML ({' '.join(str(e).split())})") from None
    for c in CONFIG_FLAGS:
        v = getattr(args, c.flag[2:].replace("-", "_"))
        if v is None:
            continue
        if not _config_has(cfg_cls, c.field):
            from harness import registry

            users = [e.name for e in registry.entries("method") if _config_has(e.config_cls, c.field)]
            raise InitInputError(f"{c.flag}: method {method!r} has no option {c.field} (it is for: {', '.join(users)})")
        if c.field in values and values[c.field] != v:
            raise InitInputError(f"{c.flag} {v} and --config {c.field}={values[c.field]} disagree; give one of them")
        if c.is_path and Path(v).expanduser().exists():
            v = str(Path(v).expanduser().resolve())
        elif c.is_path and c.field == "aux_model_path":
            raise InitInputError(f"{c.flag} {v}: file not found")
        values[c.field] = v
    return values


def _print_summary(console: Any, summary: dict, timings: dict, method_timings: dict, out: Path,
                   warnings: list[str], new_head: dict | None) -> None:
    """The one account of what the init did: rows by provenance (random rows with their reasons), time per step."""
    from rich.markup import escape
    from rich.table import Table

    n = max(summary["n_target"], 1)
    rr = summary["random_rows"]
    console.print(f"{out}: {summary['n_target']:,} target tokens", highlight=False)
    t = Table()
    t.add_column("provenance", style="bold")
    t.add_column("tokens", justify="right")
    t.add_column("share", justify="right")
    t.add_column("meaning")
    for k, v in summary["categories"].items():
        meaning = PROVENANCE_CATEGORIES[k].split(":")[0]
        if k == "fallback":
            meaning += f" ({'above' if rr['above_threshold'] else 'within'} --max-random-rows {rr['max_random_rows']:g})"
        t.add_row(k, f"{v:,}", f"{v / n:.1%}", meaning)
    console.print(t)
    if rr["reasons"]:
        console.print(f"random rows by reason ({rr['count']:,}):")
        for r in rr["reasons"]:
            shown = ", ".join(r["examples"][:5]) + (", …" if r["count"] > 5 else "")
            console.print(escape(f"  {r['count']:>7,}  {r['reason']} (e.g. {shown})"), highlight=False)
    steps = Table(title="time per step", title_justify="left")
    steps.add_column("step")
    steps.add_column("seconds", justify="right")
    for k, v in timings.items():
        steps.add_row(k, f"{v:.1f}")
    for k, v in method_timings.items():
        if isinstance(v, (int, float)) and k != "total_s":
            steps.add_row(f"  method: {k.removesuffix('_s')}", f"{v:.1f}")
    console.print(steps)
    if new_head:
        console.print(f"[bold]new head[/]: {len(new_head['missing'])} head tensors were initialized at random (--new-head)")
    if warnings:
        console.print(f"{len(warnings)} warning(s), recorded in init_info.json")
    console.print(f"wrote {out} (model, tokenizer, init_info.json)")


def _check_numbers(args: argparse.Namespace) -> None:
    """The numeric flags, before anything is read or loaded."""
    import math

    if args.seed < 0:
        raise InitInputError(f"--seed {args.seed}: expected an integer >= 0")
    if not (math.isfinite(args.max_random_rows) and 0 <= args.max_random_rows <= 1):
        raise InitInputError(f"--max-random-rows {args.max_random_rows}: expected a share between 0 and 1, e.g. 0.1")
    if args.mode == "extend" and args.extend_top_n < 1:
        raise InitInputError(f"--extend-top-n {args.extend_top_n}: expected an integer >= 1")


def run(args: argparse.Namespace, *, t0: float | None = None, watchdog: Any = None) -> int:
    """``tokxfer init``: checks, initialization, save, ``init_info.json``, summary. Returns the exit status.

    ``t0`` (when the command started) and ``watchdog`` (a :class:`harness.progress.Watchdog` guarding a
    log against silence) come from the command line's entry point, which starts both before the
    libraries load.
    """
    from harness import about, progress, registry

    if args.explain:
        try:
            print(explain(args.method))
        except registry.RegistryError as e:
            raise registry.RegistryError(f"--method: {e}") from None
        return 0
    for flag in ("source", "target_tokenizer", "out"):
        if not getattr(args, flag):
            raise InitInputError(f"--{flag.replace('_', '-')} is required (unless --explain)")
    _check_numbers(args)
    started = about.now_iso()
    t_start = time.perf_counter()
    notes = Notes(quiet=args.quiet, t0=t0, watchdog=watchdog)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.overwrite:
        raise FileExistsError(
            f"--out {out}: {'exists and is not a directory' if not out.is_dir() else 'is not empty'}; "
            f"choose a new directory or pass --overwrite"
        )
    try:
        entry = registry.get("method", args.method)
    except registry.RegistryError as e:
        raise registry.RegistryError(f"--method: {e}") from None
    cfg_values = _config_values(args, entry.config_cls, args.method)
    paths = {f.field: (_existing_model_dir if f.directory else _existing_file)(getattr(args, f.field), f.flag)
             for f in INPUT_FLAGS}
    cfg = _method_config(args, entry.config_cls, cfg_values, paths)

    with progress.reporting(None if args.quiet else _bar_factory(notes), lines=None if args.quiet else notes.note):
        method_paths = _check_files(args, entry, cfg, cfg_values, paths, notes)  # no tokenizer or model loaded yet
        t0 = time.perf_counter()
        tgt, src_tok, new_head = _load_tokenizers(args, notes)
        input_info = _check_inputs_against_tokenizers(args, entry.make(cfg), paths, method_paths, tgt, src_tok, notes)
        t_checks = time.perf_counter() - t0
        init = _initialize(args, cfg, tgt, method_paths, new_head, notes)
    t0 = time.perf_counter()
    notes.note(f"saving to {out}")
    out.mkdir(parents=True, exist_ok=True)
    init.model.save_pretrained(out)
    init.tokenizer.save_pretrained(out)
    t_save = time.perf_counter() - t0
    summary = provenance_summary(init.result, init.source_tokenizer, init.tokenizer, max_random_rows=args.max_random_rows)
    warning = random_rows_warning(summary)
    if warning:
        notes.warn(warning)
    timings = {"checks_s": t_checks, **init.timings, "save_s": t_save, "total_s": time.perf_counter() - t_start}
    info = _init_info(args, cfg, init, paths, method_paths, input_info, new_head, notes, summary, timings, started)
    from harness.run.records import _json_default  # noqa: PLC2701 - the records' own JSON encoding

    (out / "init_info.json").write_text(json.dumps(info, indent=2, ensure_ascii=False, default=_json_default) + "\n")
    from rich.console import Console

    _print_summary(Console(soft_wrap=True), summary, timings, init.result.info.get("timings") or {}, out.resolve(),
                   notes.warnings, new_head)
    return 0


def _typed_options(args: argparse.Namespace, cfg_values: dict) -> dict[str, str]:
    """How the user spelled each method option they set: ``--source-tokens english-only`` or ``--config k=v``."""
    typed = {}
    for item in args.config or []:
        k, _, _ = item.partition("=")
        typed[k.strip()] = f"--config {item}"
    for c in CONFIG_FLAGS:
        v = getattr(args, c.flag[2:].replace("-", "_"))
        if v is not None:
            typed[c.field] = f"{c.flag} {v}"
    return {k: v for k, v in typed.items() if k in cfg_values}


def _missing_line(problems: list[str], method: str) -> str:
    more = f" (and {len(problems) - 1} more: " + "; ".join(problems[1:]) + ")" if len(problems) > 1 else ""
    return f"{problems[0]}{more}. See `tokxfer init --method {method} --explain`"


def _method_config(args: argparse.Namespace, cfg_cls: type, cfg_values: dict, paths: dict) -> Any:
    """The method's config from ``--config`` and the option flags; an error is told in the flags the user typed.

    A config that refuses a combination the flags left incomplete (``--source-tokens english-only``
    without ``--english-tokenizer``) is answered with the missing input, in flags; any other refusal
    names ``--config`` when the user used it, else the method.
    """
    import types

    from harness.registry import build_config

    where = "--config" if args.config else f"--method {args.method}"
    try:
        return build_config(cfg_cls, cfg_values, where=where)
    except ValueError as e:
        # the config names the option-input it lacks (english_tokenizer): say which flag is missing, and when
        about = tuple(n for n in method_needs(args.method) or ()
                      if any(i not in INPUT_BY_FIELD and re.search(rf"\b{i}\b", str(e)) for i in n.inputs))
        provisional = types.SimpleNamespace(**{**{f.name: _default(f) for f in dataclasses.fields(cfg_cls)}, **cfg_values})
        given = {k for k, v in paths.items() if v is not None} | {k for k, v in cfg_values.items() if v}
        problems = missing_inputs(args.method, provisional, given, _typed_options(args, cfg_values), about)
        if problems:
            raise InitInputError(_missing_line(problems, args.method)) from None
        raise InitInputError(" ".join(flag_wording(str(e)).split())) from None


def _check_files(args: argparse.Namespace, entry: Any, cfg: Any, cfg_values: dict, paths: dict, notes: Notes) -> dict:
    """The input files (``paths``: every given input, checked to exist) are readable text and the method has what
    it needs; returns ``method_paths``: those the method reads (others None)."""
    for field in ("target_corpus", "source_corpus"):
        if paths[field] is not None:
            from harness.run.resources import ResourceError, check_corpus

            try:
                check_corpus(paths[field])
            except ResourceError as e:
                raise InitInputError(f"{INPUT_BY_FIELD[field].flag} {e}") from None
    given = {k for k, v in paths.items() if v is not None} | {k for k, v in cfg_values.items() if v}
    problems = missing_inputs(args.method, cfg, given, _typed_options(args, cfg_values))
    if args.mode == "extend" and paths["target_corpus"] is None:
        problems.append("--mode extend needs --target-corpus (it ranks the target tokens to add)")
    if problems:
        raise InitInputError(_missing_line(problems, args.method))
    reads = set(method_reads(entry.cls)) | ({"target_corpus"} if args.mode == "extend" else set())
    method_paths = {k: (v if k in reads else None) for k, v in paths.items()}
    for k, v in paths.items():
        if v is not None and k not in reads:
            notes.warn(f"{INPUT_BY_FIELD[k].flag} is not read by --method {args.method} (used only to check the other inputs)")
    return method_paths


def _load_tokenizers(args: argparse.Namespace, notes: Notes) -> tuple[Any, Any, dict | None]:
    """The target and source tokenizers (seconds), then the source checkpoint's head (no weights
    loaded); returns ``(target_tokenizer, source_tokenizer, new_head)``, ``new_head`` the record of
    a head that ``--new-head`` lets start random (None when the checkpoint has it)."""
    from harness.run import resources

    tgt = _load_tokenizer(args.target_tokenizer, "--target-tokenizer")
    resources.check_model_dir(args.source)
    src_tok = _load_tokenizer(args.source_tokenizer or args.source, "--source-tokenizer" if args.source_tokenizer else "--source")
    if getattr(args, "english_tokenizer", None):  # read by the method much later: a broken file is found now
        _load_tokenizer(args.english_tokenizer, "--english-tokenizer")
    try:
        head = missing_head(args.source, args.kind)
    except HeadError as e:
        raise InitInputError(f"--source {e} (--kind {args.kind})") from None
    new_head = None
    if head is not None and head[0]:
        missing, archs = head
        if not args.new_head:
            raise InitInputError(
                f"--source {args.source}: the checkpoint ({', '.join(archs) or 'no architectures listed'}) has no --kind {args.kind} "
                f"head ({len(missing)} tensors missing, e.g. {missing[0]}); the saved model would carry a random head. Pass "
                "--new-head to accept that (recorded in init_info.json), or use a checkpoint with the head")
        new_head = {"missing": missing, "architectures": archs, "seed": args.seed,
                    "note": "initialized by transformers' default initialization under a generator seeded from --seed"}
        notes.warn(f"--new-head: {len(missing)} head tensors of the --kind {args.kind} model are not in the checkpoint "
                   f"({', '.join(archs)}) and will be random")
    elif head is None:
        notes.note(f"--source {args.source}: not a local directory; its --kind {args.kind} head was not checked")
    return tgt, src_tok, new_head


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "config.json")


def _load_tokenizer(value: str, flag: str) -> Any:
    """A tokenizer a flag names; a file that cannot be read is named in the error (with the flag)."""
    from harness.run import resources

    try:
        return resources.load_tokenizer(value)
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises plain Exceptions for broken files
        raise InitInputError(f"{flag} {value}: {_unreadable_tokenizer(Path(value).expanduser(), e)}") from None


def _unreadable_tokenizer(d: Path, error: BaseException) -> str:
    """Which file of tokenizer directory ``d`` could not be read, and why (the loader's own message otherwise)."""
    said = " ".join(str(error).split())[:300] or type(error).__name__
    if not d.is_dir():
        return f"cannot load a tokenizer ({said})"
    for name in _TOKENIZER_FILES:
        f = d / name
        if not f.is_file():
            continue
        try:
            json.loads(f.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as je:
            return f"cannot read {f}: not valid JSON ({' '.join(str(je).split())[:200]})"
    if (d / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            Tokenizer.from_file(str(d / "tokenizer.json"))
        except Exception as te:  # noqa: BLE001 - as above
            return f"cannot read {d / 'tokenizer.json'}: not a tokenizers file ({' '.join(str(te).split())[:200]})"
    present = ", ".join(sorted(p.name for p in d.iterdir())[:8]) or "the directory is empty"
    return f"cannot load a tokenizer from this directory ({present}): {said}"


def _check_inputs_against_tokenizers(args: argparse.Namespace, method: Any, paths: dict, method_paths: dict, tgt: Any,
                                     src_tok: Any, notes: Notes) -> dict:
    """Dictionary and parallel corpus (swapped if asked) against the tokenizers and corpora, then the
    method's own ``preflight`` checks; ``method_paths`` is updated in place with prepared files.
    Returns what the checks found (``init_info.json``'s ``inputs``/``checks``)."""
    ctx_kw = {
        "target_vocab": corpus_vocabulary(paths["target_corpus"]) if paths["target_corpus"] is not None else None,
        "source_vocab": corpus_vocabulary(paths["source_corpus"]) if paths["source_corpus"] is not None else None,
        "target_tok": tgt, "source_tok": src_tok,
    }
    input_info: dict[str, Any] = {}
    if method_paths["dictionary"] is not None:
        method_paths["dictionary"], input_info["dictionary"] = prepare_dictionary(paths["dictionary"], args.swap_dictionary, ctx_kw, notes)
    elif args.swap_dictionary:
        raise InitInputError("--swap-dictionary without --dictionary")
    if method_paths["parallel_corpus"] is not None:
        method_paths["parallel_corpus"], input_info["parallel_corpus"] = prepare_parallel(
            paths["parallel_corpus"], args.swap_parallel, ctx_kw, notes)
    elif args.swap_parallel:
        raise InitInputError("--swap-parallel without --parallel-corpus")
    n_source = _source_rows(args.source, src_tok)
    preflight = getattr(method, "preflight", None)
    if preflight is not None:  # the method's own checks (optional hook of the EmbeddingInitializer protocol)
        input_info.update(preflight(method_paths, src_tok, tgt, n_source=n_source, mode=args.mode, notes=notes))
    return input_info


def _initialize(args: argparse.Namespace, cfg: Any, tgt: Any, method_paths: dict, new_head: dict | None,
                notes: Notes) -> Any:
    """The long part: load the source and run the method (progress bars unless --quiet); a method's
    message about ``inputs.<field>`` is reworded with the command-line flag."""
    import contextlib

    from harness import progress, seeding
    from harness.model.initialize import InitRequest, initialize
    from harness.protocols import TransferResources

    notes.note(f"loading {args.source} and running {args.method}")
    seeded = seeding.seeded_globals(args.seed, "init", "new-head") if new_head else contextlib.nullcontext()
    try:
        with seeded, progress.tool_output(not args.quiet):
            return initialize(InitRequest(
                source_model=args.source, source_tokenizer=args.source_tokenizer, target_tokenizer=tgt,
                method=args.method, method_config=cfg, seed=args.seed, model_kind=args.kind,
                resources=TransferResources(**method_paths), mode=args.mode, extend_top_n=args.extend_top_n,
                bias=args.bias,
            ))
    except Exception as e:
        text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        worded = flag_wording(text)
        if worded != text:
            raise InitInputError(" ".join(worded.split())) from e
        raise


def _init_info(args: argparse.Namespace, cfg: Any, init: Any, paths: dict, method_paths: dict, input_info: dict,
               new_head: dict | None, notes: Notes, summary: dict, timings: dict, started: str) -> dict:
    """The content of ``init_info.json``."""
    from harness import about
    from harness.model.initialize import init_summary, provenance_string
    from harness.protocols import PROVENANCE_NAMES

    info = init_summary(init)
    info.update({
        "init_info_version": INIT_INFO_VERSION,
        "tokxfer_version": about.package_version(),
        "git": about.git_info(),
        "command": ["tokxfer", *getattr(args, "argv", [])] if getattr(args, "argv", None) else None,
        "cwd": os.getcwd(),
        "method": args.method,
        "config": dataclasses.asdict(cfg),
        "seed": args.seed,
        "kind": args.kind, "mode": args.mode, "extend_top_n": args.extend_top_n if args.mode == "extend" else None,
        "bias": args.bias,
        "source": _model_record(args.source, "--source"),
        "source_tokenizer": _model_record(args.source_tokenizer or args.source, "--source-tokenizer"),
        "target_tokenizer": _model_record(args.target_tokenizer, "--target-tokenizer"),
        "inputs": {k: {**(_model_record if INPUT_BY_FIELD[k].directory else _input_record)(v, INPUT_BY_FIELD[k].flag),
                       "read_by_method": method_paths[k] is not None,
                       **(input_info.get(k) or {})} for k, v in paths.items() if v is not None},
        "checks": {k: v for k, v in input_info.items() if k not in paths and v is not None},
        "new_head": new_head,
        "warnings": notes.warnings,
        "categories": summary["categories"],
        "category_meanings": PROVENANCE_CATEGORIES,
        "random_rows": summary["random_rows"],
        "provenance_codes": {str(k): v for k, v in PROVENANCE_NAMES.items()},
        "provenance": provenance_string(init.result.mapping),
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "environment": about.environment(),
        "started_at": started,
        "finished_at": about.now_iso(),
    })
    return info


def _bar_factory(notes: Notes) -> Callable[[str, float | None], Any]:
    """Progress bars of long steps (:mod:`harness.progress`): tqdm on a terminal, plain note lines in a log."""
    from harness import progress

    if not sys.stderr.isatty():
        return progress.line_bars(notes.note)
    from tqdm.auto import tqdm

    return lambda desc, total: tqdm(total=total, desc=desc, file=sys.stderr, dynamic_ncols=True)


def _source_rows(source: str, src_tok: Any) -> int:
    """Rows of the source embedding matrix, from the model config (no weights loaded)."""
    try:
        import transformers

        cfg = transformers.AutoConfig.from_pretrained(source)
        text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        v = getattr(text, "vocab_size", None)
        return int(v) if v else len(src_tok)
    except (OSError, ValueError):
        return len(src_tok)


