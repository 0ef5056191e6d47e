"""Logged baselines: `bench --baseline` reuses a case's baseline time from an earlier run instead of timing it again.

A torch solver can take seconds per call, so timing every baseline afresh can outlast a GPU session.
A logged baseline serves only the exact same case spec, baseline name, GPU name and torch version,
and only a run on the same kind of device (a CPU record never serves a GPU run). Only freshly timed
baselines of passing bench records count, so a reused value always names the run that measured it.
"""
from __future__ import annotations

from pathlib import Path

from popcorn.evidence import logs

# The case keys a bench --baseline adds: how the baseline time was obtained.
REUSED, RUNS, BOUNDED = "baseline_reused", "baseline_runs", "baseline_bounded"


def logged(paths: list[Path], problem: str, name: str) -> list[dict]:
    """Every freshly timed baseline NAME of PROBLEM in the passing bench records of the files, oldest first."""
    entries = []
    for path in dict.fromkeys(Path(p) for p in paths):
        for record in logs.read_records(path)[0]:
            if (record.get("mode") != "bench" or record.get("problem") != problem or record.get("baseline") != name
                    or not isinstance(record.get("time"), str) or not logs.record_passed(record)):
                continue
            for case in record["cases"] if isinstance(record.get("cases"), list) else []:
                if _fresh_baseline(case):
                    entries.append({"spec": logs.spec_key(case["spec"]), "gpu": record.get("gpu"),
                                    "torch": record.get("torch"), "on_gpu": logs.ran_on_gpu(record),
                                    "time": record["time"], "baseline_us": case["baseline_us"],
                                    RUNS: case.get(RUNS), BOUNDED: case.get(BOUNDED)})
    return sorted(entries, key=lambda entry: entry["time"])


def _fresh_baseline(case) -> bool:
    """A passing case with a positive baseline time that was measured in its own run."""
    if not isinstance(case, dict) or not isinstance(case.get("spec"), dict) or case.get("status") != "pass":
        return False
    value = case.get("baseline_us")
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and not case.get(REUSED)


def find(entries: list[dict], spec: dict, gpu: str | None, torch_version: str | None, device: str) -> dict | None:
    """The newest entry for spec measured on this GPU name, torch version and kind of device; None if none.

    A run that could not say which GPU it had (gpu None) reuses nothing; torch None (a submission that
    never imported torch) matches only torch None."""
    if not isinstance(gpu, str):
        return None
    key, on_gpu = logs.spec_key(spec), device.startswith("cuda")
    matches = [e for e in entries
               if e["spec"] == key and e["gpu"] == gpu and e["torch"] == torch_version and e["on_gpu"] == on_gpu]
    return matches[-1] if matches else None


def reused_fields(entry: dict) -> dict:
    """A case's baseline keys taken from a logged entry, marked with the time of the run that measured it."""
    return {"baseline_us": entry["baseline_us"], RUNS: entry[RUNS], BOUNDED: entry[BOUNDED], REUSED: entry["time"]}


def timed_fields(baseline_us: float | None, runs: int | None, bounded: bool) -> dict:
    """A case's baseline keys for a baseline timed in this run."""
    return {"baseline_us": baseline_us, RUNS: runs, BOUNDED: bounded, REUSED: None}
