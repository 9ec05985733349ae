"""Picklable stand-ins for :func:`harness.run.runner.execute`, importable by worker processes and jobs."""

from __future__ import annotations

import os
import signal

from harness.run import records


def fake_execute(spec, runs_dir, progress=False):
    """Write an ok record without running anything; die (SIGKILL) in the trial of seed 2."""
    if spec.seed == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    rec = {"schema_version": records.SCHEMA_VERSION, "trial_id": spec.trial_id, "experiment": spec.experiment,
           "status": "ok", "seed": spec.seed, "metrics": {spec.target.language: {"loss": 1.0}},
           "environment": {"pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}}
    records.write_record(os.path.join(runs_dir, spec.experiment, "records"), rec)
    return rec
