"""fastText training must not depend on what the process freed before (glibc heap reuse).

fastText-numpy2 leaves part of its input matrix uninitialized; a process whose heap holds large
freed blocks full of stale bytes used to train on them ("Encountered NaN", or silently other
vectors). Each case runs in a fresh interpreter so the heap state is exactly the one built here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = r"""
import ctypes, ctypes.util, json, random, sys
import numpy as np
from methods import _fasttext

text, dirty, out = sys.argv[1], sys.argv[2] == "dirty", sys.argv[3]
if dirty:  # ~150 MB of heap blocks filled with 0xff (NaN bytes), freed below a live guard block
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    blocks = [libc.malloc(100 * 1024) for _ in range(1500)]
    for b in blocks:
        libc.memset(b, 0xFF, 100 * 1024)
    guard = libc.malloc(5000)
    for b in blocks:
        libc.free(b)
try:
    ft = _fasttext.train_fasttext(text, dim=16, epoch=1, min_count=1, model="skipgram", bucket=_fasttext.min_bucket(16),
                                  seed=0, threads=1)
except RuntimeError as e:
    json.dump({"error": str(e)}, open(out, "w"))
    sys.exit(0)
np.save(out + ".npy", ft.get_input_matrix())
json.dump({"error": None}, open(out, "w"))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc heap behaviour")
def test_training_on_a_dirty_heap_equals_training_in_a_fresh_process(tmp_path):
    import ctypes.util
    import random

    import numpy as np

    if not ctypes.util.find_library("c") or not hasattr(ctypes.CDLL(ctypes.util.find_library("c")), "mallopt"):
        pytest.skip("not glibc: mallopt is unavailable")
    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    text = tmp_path / "text.txt"
    text.write_text("".join(" ".join(rng.choice(words) for _ in range(12)) + "\n" for _ in range(2000)))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    results = {}
    for state in ("clean", "dirty"):
        out = tmp_path / state
        subprocess.run([sys.executable, str(script), str(text), state, str(out)], check=True, timeout=300)
        results[state] = json.loads(out.read_text())
    assert results["clean"]["error"] is None and results["dirty"]["error"] is None, results
    clean, dirty = np.load(f"{tmp_path / 'clean'}.npy"), np.load(f"{tmp_path / 'dirty'}.npy")
    assert np.array_equal(clean, dirty), "the vectors depend on stale heap bytes"

