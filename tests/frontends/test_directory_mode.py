"""Directory mode in parallel: the same outputs as one process, in the same order.

`-j 2` (a process pool) and `-j 1` (everything in this process) must print the same
bytes, the same summary and exit with the same code over a tree of naive nnsight
scripts, plain Python, a file that does not parse and one that is not UTF-8. A progress
bar is drawn on a terminal only; Ctrl-C stops the workers without tracebacks; importing
the command line stays cheap.
"""

from __future__ import annotations

import io
import itertools
import os
import pickle
import pty
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from generators import dense_nnsight_script, plain_python  # noqa: E402

from ndif_opt.frontends import batch  # noqa: E402
from ndif_opt.frontends.files import SourceFile  # noqa: E402
from ndif_opt.frontends.progress import Progress  # noqa: E402
from ndif_opt.options import Options  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# the quicker examples (each well under a second); legacy_api is pre-0.5: findings only
EXAMPLES = ["client_effects", "client_list", "helper_function", "layer_statistics", "logit_lens",
            "prompt_loop", "legacy_api"]
BAD = {"broken.py": "cannot parse", "latin.py": "not valid utf-8"}


def run(*args, cwd=None, timeout: float = 120, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "ndif_opt.frontends.cli", *map(str, args)],
        capture_output=True, text=True, cwd=cwd, timeout=timeout, **kwargs,
    )


def make_tree(root: Path) -> Path:
    """A few dozen files: naive scripts (copied from examples/), a notebook, plain
    Python, one syntax error and one latin-1 file without a coding cookie."""
    for i, name in enumerate(EXAMPLES):
        target = root / f"pkg{i % 3}" / f"{name}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "examples" / f"{name}.py", target)
    shutil.copy(ROOT / "examples" / "notebook_sweep.ipynb", root / "pkg1" / "notebook_sweep.ipynb")
    plain = plain_python(40)
    for i in range(24):
        (root / f"pkg{i % 3}" / f"plain_{i:02}.py").write_text(f"# module {i}\n" + plain)
    (root / "pkg2" / "broken.py").write_text("from nnsight import LanguageModel\nwith model.trace(:\n")
    (root / "pkg0" / "latin.py").write_bytes(b"from nnsight import LanguageModel\nname = 'caf\xe9'\n")
    return root


def count_files(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if p.suffix in (".py", ".ipynb"))


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return make_tree(tmp_path_factory.mktemp("tree"))


def group_is_gone(pgid: int, timeout: float = 10) -> bool:
    """No process of the group is left (workers included)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


# -- the same outputs, whatever the number of jobs -------------------------------------------


def test_jobs_two_and_one_agree(tree):
    one = run(tree, "--diff", "-j", "1")
    two = run(tree, "--diff", "-j", "2")
    assert one.returncode == two.returncode == 2, one.stderr  # the two bad files
    assert "Traceback" not in two.stderr
    assert two.stdout == one.stdout
    assert two.stderr == one.stderr
    n = count_files(tree)
    assert f"{n} file(s): 7 would change, {n - 9} unchanged, 2 error(s)" in two.stderr
    # one line per bad file, in input order (sorted paths), before the summary
    errors = [line for line in two.stderr.splitlines() if line.startswith("ndif-opt:")]
    assert [Path(line.split(": ")[1]).name for line in errors] == ["latin.py", "broken.py"]
    for line, cause in zip(errors, [BAD["latin.py"], BAD["broken.py"]]):
        assert cause in line
    # diffs in input order
    headers = [line.split()[1] for line in two.stdout.splitlines() if line.startswith("--- ")]
    assert headers and headers == sorted(headers, key=lambda p: (Path(p).parent, Path(p).name))
    assert "\r" not in two.stderr, "no progress bar when stderr is not a terminal"


def test_in_place_in_parallel_writes_what_one_process_writes(tree, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tree, copy)
    done = run(copy, "--in-place", "-q", "-j", "2")
    assert done.returncode == 2, done.stderr
    for name in EXAMPLES:
        if name == "legacy_api":  # needs --migrate to change
            continue
        written = next(copy.rglob(f"{name}.py")).read_text()
        assert written == (ROOT / "examples" / "optimized" / f"{name}.py").read_text(), name
    assert next(copy.rglob("legacy_api.py")).read_text() == (ROOT / "examples" / "legacy_api.py").read_text()
    notebook = next(copy.rglob("notebook_sweep.ipynb")).read_text()
    assert notebook == (ROOT / "examples" / "optimized" / "notebook_sweep.ipynb").read_text()
    for name in ("broken.py", "latin.py", "plain_00.py"):
        assert next(copy.rglob(name)).read_bytes() == next(tree.rglob(name)).read_bytes()
    assert not list(copy.rglob(".*.tmp")), "a temporary file was left behind"


def test_pyproject_options_apply_per_file_in_workers(tmp_path):
    """Each file's own [tool.ndif-opt] is read in the parent and travels with its task."""
    script = (ROOT / "examples" / "prompt_loop.py").read_text()
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "s.py").write_text(script)
        (tmp_path / name / "t.py").write_text(script)
    (tmp_path / ".git").mkdir()  # the configuration search stops here
    (tmp_path / "b" / "pyproject.toml").write_text('[tool.ndif-opt]\nignore = ["session-hoisting"]\n')
    done = run(tmp_path, "--diff", "-q", "-j", "2")
    assert done.returncode == 0, done.stderr
    chunks = done.stdout.split("--- ")[1:]
    by_file = {chunk.split()[0]: chunk for chunk in chunks}
    assert sum(f"{os.sep}a{os.sep}" in key for key in by_file) == 2, done.stdout
    for key, chunk in by_file.items():
        hoisted = "+with model.session(remote=True):" in chunk
        assert hoisted is (os.sep + "a" + os.sep in key), key


def test_jobs_must_be_positive(tree):
    done = run(tree, "--check", "-j", "0")
    assert done.returncode == 2 and "--jobs" in done.stderr


# -- the pool itself, in process --------------------------------------------------------------


def slow_first(source: SourceFile, options: Options):
    """A task whose first inputs finish last."""
    number = int(Path(source.path).stem.split("_")[1])
    time.sleep(0.05 * (5 - number))
    return batch.work(source, options)


def crash_on_boom(source: SourceFile, options: Options):
    if source.path.endswith("boom.py"):
        os._exit(3)  # a worker dying (a segfault, the OOM killer)
    return batch.work(source, options)


def nnsight_files(root: Path, count: int) -> list[str]:
    script = (ROOT / "examples" / "client_list.py").read_text()
    paths = []
    for i in range(count):
        path = root / f"f_{i}.py"
        path.write_text(script)
        paths.append(str(path))
    return paths


def test_outcomes_keep_input_order_when_workers_finish_out_of_order(tmp_path):
    paths = nnsight_files(tmp_path, 5)
    options = {p: Options() for p in paths}
    done_order: list[int] = []

    class Recorder:
        def advance(self):
            done_order.append(len(done_order))

    outcomes = batch.process(paths, options, jobs=2, progress=Recorder(), task=slow_first)
    assert [o.path for o in outcomes] == paths
    assert all(o.error is None and o.result.changed for o in outcomes)
    assert len(done_order) == 5
    serial = batch.process(paths, options, jobs=1)
    assert [o.result for o in serial] == [o.result for o in outcomes]


def test_a_dying_worker_fails_only_its_own_file(tmp_path):
    paths = nnsight_files(tmp_path, 3)
    boom = tmp_path / "boom.py"
    boom.write_text((ROOT / "examples" / "client_list.py").read_text())
    paths.insert(1, str(boom))
    outcomes = batch.process(paths, {p: Options() for p in paths}, jobs=2, task=crash_on_boom)
    assert [o.path for o in outcomes] == paths
    assert outcomes[1].error is not None and "boom.py" in outcomes[1].error
    assert "stopped unexpectedly" in outcomes[1].error
    assert all(o.error is None and o.result.changed for i, o in enumerate(outcomes) if i != 1)


def sleepy(source, options):
    time.sleep(60)


class InterruptedWhileWaiting:
    """A progress bar whose redraw (while the workers run) is where Ctrl-C lands."""

    def advance(self):
        pass

    def draw(self):
        raise KeyboardInterrupt


def test_an_interrupt_leaves_no_thread_of_the_pool_behind(tmp_path):
    """After Ctrl-C the pool's manager thread has ended before the interrupt propagates:
    alive at exit, Python 3.11's exit hook races it on a closed pipe and prints an
    "Exception ignored ... Bad file descriptor" traceback. Nothing joined the thread before
    (``shutdown()`` drops the pool's reference to it), so this failed only when the thread
    was slow, on a loaded machine (once in CI, through the Ctrl-C test below)."""
    paths = nnsight_files(tmp_path, 4)
    before = set(threading.enumerate())
    with pytest.raises(KeyboardInterrupt):
        batch.process(paths, {p: Options() for p in paths}, jobs=2, progress=InterruptedWhileWaiting(), task=sleepy)
    assert [t.name for t in threading.enumerate() if t not in before] == []


def test_results_survive_pickling(tree):
    """What a worker sends back (results, notebook results, errors) pickles exactly."""
    files = sorted(str(p) for p in tree.rglob("*") if p.suffix in (".py", ".ipynb"))
    outcomes = batch.process(files, {p: Options() for p in files}, jobs=1)
    assert any(o.error for o in outcomes) and any(o.result and o.result.findings for o in outcomes)
    assert any(getattr(o.result, "notebook", None) is not None for o in outcomes)
    for outcome in outcomes:
        assert pickle.loads(pickle.dumps(outcome)) == outcome
    assert pickle.loads(pickle.dumps(Options(cost={"latency": 1.0}, select=frozenset({"detach-cpu"})))) == Options(
        cost={"latency": 1.0}, select=frozenset({"detach-cpu"}))


def test_files_without_nnsight_never_start_a_pool(tmp_path, monkeypatch):
    paths = []
    for i in range(5):
        path = tmp_path / f"p{i}.py"
        path.write_text(f"x = {i}\n")
        paths.append(str(path))
    paths += nnsight_files(tmp_path, 1)  # one file to optimize: in process

    def no_pool(workers):
        raise AssertionError("a pool was started")

    monkeypatch.setattr(batch, "_pool", no_pool)
    outcomes = batch.process(paths, {p: Options() for p in paths}, jobs=4)
    assert [o.result.changed for o in outcomes] == [False] * 5 + [True]


# -- the progress bar -------------------------------------------------------------------------


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal():
    stream = FakeTTY()
    ticks = itertools.count(0.0, 0.5)  # every look at the clock: half a second later
    with Progress(3, stream, columns=80, clock=lambda: next(ticks)) as bar:
        for _ in range(3):
            bar.advance()
    text = stream.getvalue()
    assert text.startswith("\rndif-opt [")
    assert "0/3 files" in text and "3/3 files" in text and "s" in text
    assert all(len(line) < 80 for line in text.split("\r"))
    assert text.endswith("\r") and text.split("\r")[-2].strip() == "", "the bar is erased at the end"


def test_progress_bar_is_silent_when_piped_or_quiet_or_single():
    piped = io.StringIO()  # isatty() is False
    with Progress(10, piped) as bar:
        bar.advance(10)
    assert piped.getvalue() == ""
    forced_off = FakeTTY()
    with Progress(10, forced_off, tty=False) as bar:
        bar.advance(10)
    assert forced_off.getvalue() == ""
    single = FakeTTY()
    with Progress(1, single) as bar:
        bar.advance()
    assert single.getvalue() == ""


def test_progress_bar_throttles_and_fits_a_narrow_terminal():
    stream = FakeTTY()
    now = [0.0]
    bar = Progress(1000, stream, columns=30, interval=0.1, clock=lambda: now[0])
    bar.draw()
    for _ in range(999):
        bar.advance()  # the clock stands still: no redraw
    assert stream.getvalue().count("\r") == 1
    bar.advance()  # the last file always draws
    assert "1000/1000" in stream.getvalue()
    assert all(len(line) < 30 for line in stream.getvalue().split("\r"))


def read_pty(master: int, sink: list[bytes]) -> None:
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the other side closed
            return
        if not data:
            return
        sink.append(data)


def _as_from_a_terminal() -> None:
    """A shell on a terminal starts a command with Ctrl-C's signal at its default. The
    suite itself may run with it ignored (a background job of a non-interactive shell),
    which a child inherits: the CLI would then rightly ignore Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_on_a_terminal(args, on_start=None, timeout: float = 120):
    """The CLI with stderr on a pseudo-terminal (stdout piped); what each received."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "ndif_opt.frontends.cli", *map(str, args)],
        stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, start_new_session=True,
        preexec_fn=_as_from_a_terminal,
    )
    os.close(slave)
    received: list[bytes] = []
    reader = threading.Thread(target=read_pty, args=(master, received), daemon=True)
    reader.start()
    try:
        if on_start is not None:
            on_start(process)
        stdout, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        reader.join(timeout=10)
        os.close(master)
    return process, stdout.decode(), b"".join(received).decode("utf-8", "replace")


def test_progress_bar_on_a_real_terminal_and_not_with_quiet(tmp_path):
    for name in ("client_list", "prompt_loop"):
        shutil.copy(ROOT / "examples" / f"{name}.py", tmp_path / f"{name}.py")
    for i in range(10):
        (tmp_path / f"plain_{i}.py").write_text(f"x = {i}\n")
    (tmp_path / "broken.py").write_text("from nnsight import LanguageModel\nwith model.trace(:\n")
    process, stdout, terminal = run_on_a_terminal([tmp_path, "--check", "-j", "2"])
    assert process.returncode == 2
    assert "13/13 files" in terminal and "ndif-opt [" in terminal
    assert "Traceback" not in terminal
    # the bar is erased before the error line and the summary
    lines = [line.strip() for line in terminal.splitlines() if line.strip()]
    last_bar = max(i for i, line in enumerate(lines) if line.startswith("ndif-opt ["))
    error = next(i for i, line in enumerate(lines) if "broken.py: cannot parse" in line)
    assert last_bar < error and lines[-1].startswith("13 file(s):"), lines
    assert "\r" not in stdout and "files" not in stdout
    assert group_is_gone(process.pid), "a worker outlived the run"
    process, _, terminal = run_on_a_terminal([tmp_path, "--check", "-q", "-j", "2"])
    assert process.returncode == 2 and "ndif-opt [" not in terminal and "13 file(s):" in terminal


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to see the workers")
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "sigkill"])
def test_stopping_the_run_stops_the_workers(tmp_path, how):
    """Ctrl-C reaches the whole process group: one line, exit 130, nothing written, no
    KeyboardInterrupt traceback from the parent or any worker. SIGTERM to the parent
    alone (a CI timeout) stops the workers too (exit 143); after SIGKILL, which the
    parent cannot handle, the kernel ends them. No worker is left in any case."""
    slow = dense_nnsight_script(3000)  # seconds of work per file (300 lines once were; now ~0.2 s)
    for i in range(4):
        (tmp_path / f"slow_{i}.py").write_text(slow)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def stop_when_busy(process):
        deadline = time.monotonic() + 60
        while len(children_of(process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the workers are inside the pipeline
        assert process.poll() is None, "finished before the signal"
        if how == "ctrl-c":
            os.killpg(process.pid, signal.SIGINT)  # what a terminal does
        else:
            os.kill(process.pid, signal.SIGTERM if how == "sigterm" else signal.SIGKILL)

    started = time.monotonic()
    process, stdout, terminal = run_on_a_terminal([tmp_path, "--in-place", "-j", "2"], on_start=stop_when_busy)
    expected = {"ctrl-c": 130, "sigterm": 143, "sigkill": -signal.SIGKILL}[how]
    assert process.returncode == expected, terminal
    if how != "sigkill":
        assert ("ndif-opt: interrupted" if how == "ctrl-c" else "ndif-opt: terminated") in terminal
    assert "Traceback" not in terminal and "KeyboardInterrupt" not in terminal, terminal
    assert time.monotonic() - started < 30
    assert group_is_gone(process.pid), "a worker outlived the run"
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# -- start-up ---------------------------------------------------------------------------------


def test_importing_the_command_line_imports_no_heavy_module():
    code = (
        "import sys, ndif_opt.frontends.cli, ndif_opt.frontends.batch, ndif_opt.frontends.progress\n"
        "from ndif_opt.passes import PASS_IDS\n"
        "heavy = [m for m in ('libcst', 'ast_grep_py', 'pygls', 'ndif_opt.engine.pipeline', 'ndif_opt.cost_model',\n"
        "                     'ndif_opt.analysis.facts', 'ndif_opt.passes.base', 'ndif_opt.frontends.notebook') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
