"""Run a pre-0.5 script as its author did: locally, on nnsight 0.4 and a transformers 4.

A migration is proven by running: ``ndif-opt verify --migrate`` on a script that uses the
pre-0.5 API runs (a), the original, on nnsight 0.4.11 with transformers 4.51 (a decoder layer
returns a tuple there, as the author's did), and (c), the migrated script, on nnsight 0.8
through the NDIF emulation, and compares them. nnsight 0.4 and 0.8 cannot share a process, so
(a) runs in a second virtualenv, ``.venv-nnsight04`` at the project root (pins in
``requirements-nnsight04.txt``; ``NDIF_OPT_NNSIGHT04_PYTHON`` names another interpreter):

* **Parent** (:func:`run_original_04`, in the main venv): writes the job (source, file name,
  argv, files to place, frame injection) with ``torch.save`` and starts
  ``python -m ndif_opt.verify.original_04 JOB RESULT`` in that venv.
* **Child** (:func:`main`): :func:`~ndif_opt.verify.runner.run_script` in ``"local"`` mode —
  the same tiny models (same weights, same tokenizer), the same capture of stdout, files and
  module-level values — through :class:`~ndif_opt.verify.emulation_04.Release04`; the comparable namespace crosses back
  with ``torch.save`` (tensors, numbers, strings and containers of them).

**Frame injection.** nnsight 0.4 replaces the saved proxies of the caller's frame by their
values when a block exits (``CONFIG.APP.FRAME_INJECTION``, on by default), so
``logits.value`` on a name saved in that frame raises there; scripts that read ``.value``
were written for a nnsight without it (0.3, or 0.4 with it off). The child runs with
injection off when the script reads ``.value`` of a saved value, else with the default; a
saved proxy left in the namespace counts as its value (injection would have made it so).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

__all__ = ["MISSING_04", "nnsight04_python", "original_nnsight", "reads_saved_value", "run_original_04",
           "run_originals_04"]

VENV = ".venv-nnsight04"
PYTHON_VARIABLE = "NDIF_OPT_NNSIGHT04_PYTHON"
STARTUP_SECONDS = 120.0  # importing transformers and nnsight in a cold venv
MISSING_04 = (
    "the original uses the pre-0.5 nnsight API, which runs only on nnsight 0.4: no nnsight 0.4 "
    f"environment at {VENV} (create it: python3 -m venv {VENV}, then torch==2.13.0 and "
    "requirements-nnsight04.txt, as that file says), so the original was not run"
)


def nnsight04_python() -> Optional[Path]:
    """The interpreter of the nnsight 0.4 venv, if there is one."""
    named = os.environ.get(PYTHON_VARIABLE)
    if named:
        return Path(named) if Path(named).exists() else None
    root = Path(__file__).resolve().parents[2]
    python = root / VENV / "bin" / "python"
    return python if python.exists() else None


def run_original_04(source: str, *, filename: str = "script.py", argv=None, timeout: Optional[float] = None,
                    extra_files: Optional[dict] = None, frame_injection: bool = True, notebook: bool = False) -> Any:
    """(a) for a pre-0.5 script: a :class:`~ndif_opt.verify.runner.RunResult` of its local run
    on nnsight 0.4, or None when there is no nnsight 0.4 venv (:data:`MISSING_04`)."""
    job = {"source": source, "filename": filename, "argv": list(argv or []), "timeout": timeout,
           "extra_files": dict(extra_files or {}), "frame_injection": frame_injection, "notebook": notebook}
    runs = run_originals_04([job])
    return None if runs is None else runs[0]


def run_originals_04(jobs: list[dict]) -> Optional[list]:
    """Several scripts in one nnsight 0.4 process (starting one costs seconds: transformers,
    nnsight and torch to import), each run as :func:`run_original_04` runs one; ``jobs``
    hold its keyword arguments and ``source``."""
    import torch

    from .runner import RunResult

    python = nnsight04_python()
    if python is None:
        return None
    with tempfile.TemporaryDirectory(prefix="ndif_opt_04_") as work:
        job_path, result_path = Path(work) / "jobs.pt", Path(work) / "results.pt"
        torch.save(jobs, job_path)
        root = str(Path(__file__).resolve().parents[2])
        environment = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        limit = sum(job.get("timeout") or 600.0 for job in jobs) + STARTUP_SECONDS
        try:
            done = subprocess.run([str(python), "-m", "ndif_opt.verify.original_04", str(job_path), str(result_path)],
                                  capture_output=True, text=True, timeout=limit, env=environment)
        except subprocess.TimeoutExpired:
            return [RunResult(mode="local", error=f"TimeoutError: the nnsight 0.4 run exceeded {limit:g} s")] * len(jobs)
        if not result_path.exists():
            last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            failed = RunResult(mode="local", error=f"RuntimeError: the nnsight 0.4 run failed: {last}",
                               stderr=done.stderr)
            return [failed] * len(jobs)
        found = torch.load(result_path, weights_only=False)
    return [RunResult(mode="local", **fields) for fields in found]


def reads_saved_value(source: str) -> bool:
    """Does the script read `.value` of a saved value (then it was written for a nnsight
    without frame injection)?"""
    import libcst as cst

    from ndif_opt.analysis.facts import analyze
    from ndif_opt.analysis.legacy_api import scan

    try:
        facts = analyze(cst.parse_module(source))
    except cst.ParserSyntaxError:
        return False
    return any(item.kind == "value" for item in scan(facts).legacy)


def original_nnsight(source: str) -> Optional[str]:
    """"0.4" when the script uses the pre-0.5 API (its original runs on nnsight 0.4)."""
    import libcst as cst

    from ndif_opt.analysis.facts import analyze
    from ndif_opt.analysis.legacy_api import PRE_05, api_generation

    try:
        return "0.4" if api_generation(analyze(cst.parse_module(source))) == PRE_05 else None
    except cst.ParserSyntaxError:
        return None


# ---------------------------------------------------------------------------
# The child: nnsight 0.4's parts of the runner
# ---------------------------------------------------------------------------


RESULT_FIELDS = ("namespace", "stdout", "stderr", "files", "error", "traceback", "warnings",
                 "forward_passes", "layer_calls", "seconds")


def main(argv: list[str]) -> int:
    import torch
    from nnsight import CONFIG

    from .runner import run_script

    job_path, result_path = argv
    found = []
    for job in torch.load(job_path, weights_only=False):
        CONFIG.APP.FRAME_INJECTION = job["frame_injection"]
        run = run_script(job["source"], filename=job["filename"], mode="local", argv=job["argv"],
                         timeout=job["timeout"], extra_files=job["extra_files"], notebook=job.get("notebook", False))
        fields = {name: getattr(run, name) for name in RESULT_FIELDS}
        fields["namespace"] = _picklable(run.namespace)
        found.append(fields)
    torch.save(found, result_path)
    return 0


def _picklable(namespace: dict) -> dict:
    """The values ``torch.save`` can write (a comparable value nearly always is)."""
    import io

    import torch

    kept = {}
    for name, value in namespace.items():
        try:
            torch.save(value, io.BytesIO())
        except Exception:  # noqa: BLE001 - left out of the comparison, as any other
            continue
        kept[name] = value
    return kept


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
