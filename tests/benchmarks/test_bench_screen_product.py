"""benchmarks/bench_screen_product.py: every product and pass it reports is timed, and the JSON says where it ran."""

import json

from benchmarks import bench_screen_product as bsp


def test_small_run_times_every_product_and_records_the_machine(tmp_path):
    out = tmp_path / "r.json"
    assert bsp.main(["--rows", "8", "--keys", "256", "--dim", "16", "--repeat", "1", "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["shape"] == {"rows": 8, "keys": 256, "dim": 16}
    assert len(rec["ms"]) == 7 and all(v > 0 for v in rec["ms"].values())
    assert "bf16 product 64 wide, keys d x m" in rec["ms"]  # 3 x 16 + 1 rounded up to a multiple of 32
    assert "cpu_amx" in rec["machine"] and "busy" in rec["load"]
