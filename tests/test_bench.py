"""benchmarks/bench.py's directory mode runs: its worker imports what the command line imports
(the worker broke silently when the frontends moved, and the whole table stopped there)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_directory_worker_processes_the_examples():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--directory-worker",
                           str(ROOT / "examples"), "--jobs", "1"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    phase = json.loads(done.stdout.strip().splitlines()[-1])
    assert phase["wall"] > 0 and phase["cpu"] >= 0
