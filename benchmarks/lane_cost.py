"""What a grid run cost, from its records and the ``/usr/bin/time -v`` report of the ``tokxfer run`` behind it.

The real lane's cost figures (README, "Cost, measured") come from this summary of one cold run:

    /usr/bin/time -v -o run.time tokxfer run harness/configs/real-small.yaml --runs-dir RUNS --workers 2 --quiet --no-tracking
    python benchmarks/lane_cost.py --records RUNS/real-small/records --time run.time --load load.txt \\
        --commit SHA --compare leaderboards/records/real-small/records --json benchmarks/results/real_small_cold_SHA.json

``--load`` is a file of ``<unix time> <1-min> <5-min> <15-min>`` load averages sampled while the grid ran
(e.g. every 30 s: ``while true; do echo "$(date +%s) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 30; done``).
``--compare`` checks that every record's status and metrics equal those of the committed records of the
same trial (the run is then a reproduction, not only a timing). Per-method sums of the records' ``timings``
say where the time went (summed over both workers: twice the wall time is the budget of two cores).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

TIME_FIELDS = {
    "User time (seconds)": "user_s", "System time (seconds)": "sys_s", "Percent of CPU this job got": "cpu_percent",
    "Elapsed (wall clock) time (h:mm:ss or m:ss)": "wall", "Maximum resident set size (kbytes)": "peak_rss_kb",
    "Command being timed": "command", "Exit status": "exit_status",
}


def parse_time(path: Path) -> dict:
    """The fields of a GNU ``time -v`` report this summary uses; ``wall_s`` in seconds."""
    out: dict = {}
    for line in path.read_text().splitlines():
        key, _, value = line.strip().rpartition(": ")
        if key in TIME_FIELDS:
            out[TIME_FIELDS[key]] = value.strip().strip('"')
    if "wall" not in out:
        raise ValueError(f"{path}: not a /usr/bin/time -v report (no elapsed wall-clock line)")
    parts = [float(p) for p in out.pop("wall").split(":")]
    out["wall_s"] = round(sum(p * 60 ** i for i, p in enumerate(reversed(parts))), 2)
    for k in ("user_s", "sys_s"):
        out[k] = float(out[k])
    out["cpu_percent"] = int(re.sub(r"\D", "", out["cpu_percent"]))
    out["peak_rss_gb"] = round(int(out.pop("peak_rss_kb")) * 1024 / 1e9, 2)
    return out


def parse_load(path: Path) -> dict:
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    one = [float(r[1]) for r in rows]
    return {"samples": len(one), "min_1min": min(one), "max_1min": max(one),
            "mean_1min": round(sum(one) / len(one), 2)}


def summarize(records: Path, compare: Path | None) -> dict:
    per: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    status: dict[str, int] = defaultdict(int)
    same = differ = uncommitted = 0
    for f in sorted(records.glob("*.json")):
        r = json.loads(f.read_text())
        status[r["status"]] += 1
        m = r["config"]["method"].get("id") or r["config"]["method"]["name"]
        per[m]["trials"] += 1
        for k, v in (r.get("timings") or {}).items():
            per[m][k] += v
        if compare is not None:
            c = compare / f.name
            if not c.exists():
                uncommitted += 1
                continue
            a = json.loads(c.read_text())
            same_rec = a["status"] == r["status"] and a.get("metrics") == r.get("metrics")
            same, differ = same + same_rec, differ + (not same_rec)
    totals: dict[str, float] = defaultdict(float)
    for row in per.values():
        for k, v in row.items():
            if k != "trials":
                totals[k] += v
    out = {"trials": dict(status),
           "timings_by_method_s": {m: {k: round(v, 1) for k, v in row.items()} for m, row in sorted(per.items())},
           "timings_total_s": {k: round(v, 1) for k, v in sorted(totals.items())}}
    if compare is not None:
        out["compared_with"] = str(compare)
        out["identical_to_committed"], out["different"], out["not_committed"] = same, differ, uncommitted
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=Path, required=True, help="the run's records folder")
    ap.add_argument("--time", type=Path, required=True, help="/usr/bin/time -v report of the tokxfer run")
    ap.add_argument("--load", type=Path, help="load averages sampled during the run")
    ap.add_argument("--commit", required=True, help="git commit the run's code was at")
    ap.add_argument("--compare", type=Path, help="committed records to compare metrics with")
    ap.add_argument("--note", default="", help="how the machine was loaded, the cache state, …")
    ap.add_argument("--json", type=Path, required=True)
    a = ap.parse_args(argv)
    if not a.records.is_dir():
        ap.error(f"--records {a.records}: not a folder")
    out = {"bench": "lane-cost", "commit": a.commit, "note": a.note, "run": parse_time(a.time),
           **({"load": parse_load(a.load)} if a.load else {}), **summarize(a.records, a.compare)}
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=1) + "\n")
    r = out["run"]
    print(f"{a.commit}: {r['wall_s'] / 60:.1f} min wall, {r['user_s']:.0f} s user + {r['sys_s']:.0f} s sys, "
          f"peak RSS {r['peak_rss_gb']} GB, trials {out['trials']}"
          + (f", {out['identical_to_committed']} identical to committed, {out['different']} different" if a.compare else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
