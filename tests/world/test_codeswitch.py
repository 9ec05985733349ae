"""Code-switched copies for the built-in multilingual sources (harness/world/codeswitch.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harness.cache import content_hash
from harness.words import WORD_PATTERN
from harness.world import World
from harness.world import codeswitch as cs
from harness.world import pretrain as pt
from harness.world.pretrain import PretrainConfig, pretrained_source

MAP = {"tam": "tram", "yanqam": "tram", "Qak": "Gak", "nyq": "ka"}


def test_switch_replaces_mapped_words_only_and_keeps_everything_between():
    line = "Tam yanqam, peinen 3 qang nyq!"
    g = torch.Generator().manual_seed(0)
    assert cs.switch(line, MAP, 0.0, g) == line
    # probability 1: every mapped word (case-folded lookup, capital kept), the rest untouched
    assert cs.switch(line, MAP, 1.0, g) == "Tram tram, peinen 3 qang ka!"
    assert cs.switch("Qak qak", MAP, 1.0, g) == "Gak qak"  # an exact form wins; no lower-case entry for 'qak'


def test_switched_copies_are_seeded_counted_and_independent_of_the_global_rng():
    lines = ["Tam yanqam peinen qang nyq."] * 200
    runs = []
    for noise in (0, 7):
        torch.manual_seed(noise)
        runs.append(cs.switched_copies(lines, MAP, 0.3, torch.Generator().manual_seed(5)))
    (a, na), (b, nb) = runs
    assert a == b and na == nb
    assert na["words"] == 200 * 6  # five words and the full stop
    changed = sum(x != y for line, new in zip(lines, a, strict=True)
                  for x, y in zip(WORD_PATTERN.findall(line), WORD_PATTERN.findall(new), strict=True))  # fmt: skip
    assert changed == na["switched"]
    # three mapped words a line at p = 0.3: about 180 of 600, far from 0 and from all
    assert 120 < na["switched"] < 240
    other, _ = cs.switched_copies(lines, MAP, 0.3, torch.Generator().manual_seed(6))
    assert other != a


def test_read_word_map_keeps_the_most_frequent_form_and_names_bad_lines(tmp_path):
    p = tmp_path / "word_map.tsv"
    p.write_text("aho\tka\t3\naho\tle\t5\nzam\tpom\t2\n", encoding="utf-8")
    assert cs.read_word_map(p) == {"aho": "le", "zam": "pom"}
    p.write_text("aho\tka\t3\nzam pom 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"word_map.tsv:2: expected 'target<TAB>source<TAB>count'"):
        cs.read_word_map(p)


def test_config_validation_and_cache_keys():
    with pytest.raises(ValueError, match=r"codeswitch must be in \[0, 1\]"):
        PretrainConfig(extra_languages=("near",), codeswitch=1.5)
    with pytest.raises(ValueError, match="codeswitch=0.3 needs extra_languages"):
        PretrainConfig(codeswitch=0.3)
    # 0 keeps every earlier cache key (the constant of test_tlm); above 0 is another source
    assert content_hash(pt._cache_key(PretrainConfig(codeswitch=0.0), [], [])) == (
        "8fdeeb9a86eb7d500ba1095098c34092307a1af5445cf917190579fddfd34e33")
    on = PretrainConfig(extra_languages=("near",), codeswitch=0.3)
    assert content_hash(pt._cache_key(on, [], [])) != content_hash(
        pt._cache_key(PretrainConfig(extra_languages=("near",)), [], []))


def test_codeswitched_pretraining_on_the_tiny_world_records_its_switches(tiny_world):
    cfg = PretrainConfig.tiny(extra_languages=("far",), encoding="xlp", codeswitch=0.5, steps=4)
    path = Path(pretrained_source(tiny_world, config=cfg, progress=False))
    info = json.loads((path / pt.INFO_FILE).read_text())
    counts = info["codeswitch"]["far"]
    assert counts["words"] > 0 and 0.2 * counts["words"] < counts["switched"] < 0.6 * counts["words"]
    # the copies double far's text (the tokenizer, trained on the same corpus, changes a little too)
    plain = Path(pretrained_source(tiny_world, config=PretrainConfig.tiny(extra_languages=("far",), encoding="xlp",
                                                                          steps=4), progress=False))  # fmt: skip
    plain_info = json.loads((plain / pt.INFO_FILE).read_text())
    assert "codeswitch" not in plain_info
    assert info["language_blocks"]["far"] > 1.5 * plain_info["language_blocks"]["far"]
    assert World(tiny_world).word_map("far").is_file()
