"""Hostile input for the command line, run as a user would: a subprocess.

Every failure is one line on stderr that names the file and the cause, with exit code 2
(README, "Exit codes"); nothing is half-written (writes are atomic, no temporary file is
left behind); the input is never modified; in directory mode one bad file does not stop
the others and the summary line counts them. Line endings, encoding and byte-order mark
of the input are kept in the output.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from generators import HEADER, plain_python  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NAIVE = (ROOT / "examples" / "prompt_loop.py").read_text()
EXIT_ERROR = 2
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def run(*args, cwd=None, timeout: float = 120, stdin: bytes | None = None, umask: int | None = None):
    """The CLI as a subprocess; stdout and stderr as bytes (encodings are under test)."""
    return subprocess.run(
        [sys.executable, "-m", "ndif_opt.frontends.cli", *map(str, args)],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        timeout=timeout,
        preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
    )


def err(done) -> str:
    return done.stderr.decode("utf-8", "replace")


def assert_one_line_error(done, *fragments: str) -> None:
    """Exit 2, no traceback, and exactly one `ndif-opt:` line containing every fragment."""
    text = err(done)
    assert done.returncode == EXIT_ERROR, (done.returncode, text)
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.startswith("ndif-opt:")]
    assert len(lines) == 1, text
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every regular file under ``directory`` (not following symlinks) and its bytes."""
    found = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[str(path.relative_to(directory))] = path.read_bytes()
    return found


def temp_files(directory: Path) -> list[str]:
    return [p.name for p in directory.rglob(".*.tmp")]


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


# -- parse errors ---------------------------------------------------------------------------

SYNTAX_ERRORS = {
    "unclosed-paren": "from nnsight import LanguageModel\nwith model.trace(:\n",
    "unterminated-string": "from nnsight import LanguageModel\nx = 'abc\n",
    "bad-indent": "from nnsight import LanguageModel\nif True:\nprint(1)\n",
    "python2-print": "from nnsight import LanguageModel\nprint 'hello'\n",
    "stray-dedent": "from nnsight import LanguageModel\n  x = 1\ny = 2\n",
    "half-written-with": "from nnsight import LanguageModel\nfor p in ps:\n    with model.trace(p, remote=True)\n",
}


@pytest.mark.parametrize(
    "name, source",
    [
        ("bad.py", SYNTAX_ERRORS["unclosed-paren"]),
        # nothing in it to optimize, but copying it to -o with exit 0 would hide the problem
        ("plain.py", "import numpy as np\ndef f(:\n    pass\n"),
    ],
)
def test_syntax_error_is_one_line(tmp_path, name, source):
    script = write(tmp_path / name, source)
    out = tmp_path / "out.py"
    done = run(script, "-o", out)
    assert_one_line_error(done, name, "cannot parse", "line 2")
    assert script.read_text() == source
    assert not out.exists() and not temp_files(tmp_path)


def test_every_kind_of_syntax_error_is_reported_per_file(tmp_path):
    """One run over a directory (a CLI start costs a second): each file its own line."""
    for name, source in SYNTAX_ERRORS.items():
        write(tmp_path / f"{name}.py", source)
    before = snapshot(tmp_path)
    done = run(tmp_path, "--check", "-q")
    text = err(done)
    assert done.returncode == EXIT_ERROR and "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.startswith("ndif-opt:")]
    assert len(lines) == len(SYNTAX_ERRORS), text
    for name in SYNTAX_ERRORS:
        assert any(f"{name}.py: cannot parse" in line for line in lines), (name, text)
    assert f"{len(SYNTAX_ERRORS)} file(s): 0 would change, 0 unchanged, {len(SYNTAX_ERRORS)} error(s)" in text
    assert snapshot(tmp_path) == before


def test_absurd_nesting_is_an_error_not_a_crash(tmp_path):
    source = "from nnsight import LanguageModel\nx = " + "(" * 10_000 + "1" + ")" * 10_000 + "\n"
    script = write(tmp_path / "deep.py", source)
    done = run(script, "-q")
    assert_one_line_error(done, "deep.py")


# -- encodings ------------------------------------------------------------------------------


BAD_ENCODINGS = {
    "latin.py": (b"from nnsight import LanguageModel\nname = 'caf\xe9'\n", "not valid utf-8"),
    "mixed.py": (
        "from nnsight import LanguageModel\nok = 'naïve'\n".encode() + b"bad = '\xe9t\xe9'\n",
        "not valid utf-8",
    ),
    "cookie.py": (b"# -*- coding: utf-8 -*-\nfrom nnsight import x\ns = '\xff'\n", "not valid utf-8"),
    "unknown.py": (b"# coding: klingon\nfrom nnsight import x\n", "klingon"),
    "wide.py": (codecs.BOM_UTF16_LE + NAIVE.encode("utf-16-le"), "UTF-16"),
    "bom-and-cookie.py": (codecs.BOM_UTF8 + b"# coding: latin-1\nfrom nnsight import x\n", "encoding"),
}


def test_non_utf8_and_mixed_encodings(tmp_path):
    script = write(tmp_path / "latin.py", BAD_ENCODINGS["latin.py"][0])
    assert_one_line_error(run(script), "latin.py", "not valid utf-8")
    for name, (data, _) in BAD_ENCODINGS.items():
        write(tmp_path / "all" / name, data)
    write(tmp_path / "all" / "good.py", NAIVE)
    before = snapshot(tmp_path)
    done = run(tmp_path / "all", "--check", "-q")
    text = err(done)
    assert done.returncode == EXIT_ERROR and "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.startswith("ndif-opt:")]
    assert len(lines) == len(BAD_ENCODINGS), text
    for name, (_, cause) in BAD_ENCODINGS.items():
        assert any(f"{name}: " in line and cause in line for line in lines), (name, text)
    n = len(BAD_ENCODINGS)
    assert f"{n + 1} file(s): 1 would change, 0 unchanged, {n} error(s)" in text
    assert snapshot(tmp_path) == before


def latin1_script() -> bytes:
    return "# -*- coding: latin-1 -*-\n# café crème, naïve\n".encode("latin-1") + NAIVE.encode("latin-1")


def test_latin1_with_a_coding_cookie_round_trips_in_latin1(tmp_path):
    data = latin1_script()
    script = write(tmp_path / "latin.py", data)
    out = tmp_path / "out.py"
    assert run(script, "-o", out, "-q").returncode == 0
    written = out.read_bytes()
    assert written.startswith(b"# -*- coding: latin-1 -*-\n# caf\xe9 cr\xe8me, na\xefve\n")
    assert "model.session(remote=True)" in written.decode("latin-1")
    with pytest.raises(UnicodeDecodeError):
        written.decode("utf-8")  # really latin-1, not re-encoded as utf-8
    # stdout carries the same bytes as -o (so `ndif-opt f.py > g.py` is right too)
    assert run(script, "-q").stdout == written
    # in place
    copy = write(tmp_path / "copy.py", data)
    assert run(copy, "--in-place", "-q").returncode == 0
    assert copy.read_bytes() == written
    assert script.read_bytes() == data


def test_byte_order_mark_is_kept(tmp_path):
    data = codecs.BOM_UTF8 + NAIVE.encode()
    script = write(tmp_path / "bom.py", data)
    out = tmp_path / "out.py"
    assert run(script, "-o", out, "-q").returncode == 0
    written = out.read_bytes()
    assert written.startswith(codecs.BOM_UTF8) and not written.startswith(codecs.BOM_UTF8 * 2)
    assert b"model.session(remote=True)" in written
    assert run(script, "-q").stdout == written
    assert run(out, "--check", "-q").returncode == 0  # stable with the mark
    assert script.read_bytes() == data


@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_line_endings_are_kept(tmp_path, newline):
    data = NAIVE.replace("\n", newline).encode()
    script = write(tmp_path / "endings.py", data)
    out = tmp_path / "out.py"
    assert run(script, "-o", out, "-q").returncode == 0
    written = out.read_bytes()
    assert b"model.session(remote=True)" in written
    others = {"\r\n": [b"\n"], "\r": [b"\n"]}[newline]
    stripped = written.replace(newline.encode(), b"")
    for other in others:
        assert other not in stripped, "a line ending of another kind was written"
    assert written.count(newline.encode()) >= data.count(newline.encode())
    assert script.read_bytes() == data


@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_ipython_lines_keep_the_line_endings(tmp_path, newline):
    source = "!pip install nnsight\n" + NAIVE.replace("\nfor prompt", "\n%time x = 1\nfor prompt") + "%env"
    data = source.replace("\n", newline).encode()
    script = write(tmp_path / "magic.py", data)
    done = run(script, "-q")
    assert done.returncode == 0, err(done)
    assert b"model.session(remote=True)" in done.stdout
    assert done.stdout.startswith(f"!pip install nnsight{newline}".encode())
    assert f"{newline}%time x = 1{newline}".encode() in done.stdout and done.stdout.endswith(b"%env")
    assert done.stdout.replace(newline.encode(), b"").count(b"\n" if newline == "\r\n" else b"\r") == 0


def test_mixed_line_endings_are_kept_line_by_line(tmp_path):
    lines = NAIVE.split("\n")[:-1]
    data = "".join(line + ("\r\n" if i % 2 else "\n") for i, line in enumerate(lines)).encode()
    script = write(tmp_path / "mixed.py", data)
    done = run(script, "-q")
    assert done.returncode == 0
    for line in data.splitlines(keepends=True):
        body = line.rstrip(b"\r\n").strip()
        if body.startswith((b'"""', b"PROMPTS", b'"', b"]", b"print", b"from")):
            assert line.lstrip() in done.stdout, line  # untouched lines keep their ending


def test_tab_indentation(tmp_path):
    source = NAIVE.replace("        logits", "\t\tlogits").replace("    ", "\t")
    script = write(tmp_path / "tabs.py", source)
    done = run(script, "-q")
    assert done.returncode == 0, err(done)
    code = done.stdout.decode()
    assert "model.session(remote=True)" in code
    compile(code, "tabs.py", "exec")  # no TabError: indentation stays consistent
    again = write(tmp_path / "again.py", code)
    assert run(again, "--check", "-q").returncode == 0


# -- odd files ------------------------------------------------------------------------------


def test_binary_file(tmp_path):
    binary = write(tmp_path / "blob.py", b"\x7fELF\x02\x01\x01\x00\x00nnsight remote" + bytes(range(256)))
    assert_one_line_error(run(binary), "blob.py", "binary")


def test_empty_file_and_bom_only_file(tmp_path):
    empty = write(tmp_path / "empty.py", b"")
    done = run(empty)
    assert done.returncode == 0 and done.stdout == b""
    out = tmp_path / "out.py"
    assert run(empty, "-o", out).returncode == 0 and out.read_bytes() == b""
    bom = write(tmp_path / "bom.py", codecs.BOM_UTF8)
    assert run(bom).stdout == codecs.BOM_UTF8


def test_fifty_thousand_lines_without_nnsight_finish_fast(tmp_path):
    data = plain_python(50_000).encode()
    script = write(tmp_path / "big.py", data)
    done = run(script, timeout=60)
    assert done.returncode == 0 and done.stdout == data


def test_fifty_thousand_lines_with_one_remote_loop_finish(tmp_path):
    tail = (
        "\nresults = []\nfor layer in LAYERS:\n    with model.trace(PROMPT, remote=True):\n"
        "        results.append(model.transformer.h[layer].output.save())\n"
    )
    script = write(tmp_path / "big.py", HEADER + plain_python(50_000) + tail)
    # only the loop's window meets libcst: ~4 s here, where libcst.parse_module alone takes ~10 s
    done = run(script, "-q", timeout=30)
    assert done.returncode == 0 and b"model.session(remote=True)" in done.stdout


# -- directories ----------------------------------------------------------------------------


def test_directory_of_two_thousand_files_with_some_bad_ones(tmp_path):
    root = tmp_path / "tree"
    for i in range(2000):
        write(root / f"pkg{i // 200}" / f"m{i}.py", f"x = {i}\n")
    write(root / "pkg0" / "naive.py", NAIVE)
    write(root / "pkg1" / "broken.py", "from nnsight import LanguageModel\nwith (:\n")
    write(root / "pkg2" / "blob.py", b"\x00\x01nnsight")
    write(root / "pkg3" / "latin.py", b"from nnsight import x\ns = '\xe9'\n")
    write(root / "__pycache__" / "cached.py", "not even python (\n")  # skipped
    write(root / ".hidden" / "h.py", "not even python (\n")  # skipped
    before = snapshot(root)
    done = run(root, "--check", "-q", timeout=120)
    text = err(done)
    assert done.returncode == EXIT_ERROR, text
    assert "2004 file(s): 1 would change, 2000 unchanged, 3 error(s)" in text
    errors = [line for line in text.splitlines() if line.startswith("ndif-opt:")]
    assert sorted(Path(line.split(":")[1].strip()).name for line in errors) == [
        "blob.py", "broken.py", "latin.py"
    ]
    assert snapshot(root) == before


def test_directory_in_place_rewrites_the_good_files_despite_a_bad_one(tmp_path):
    good, bad = write(tmp_path / "a.py", NAIVE), write(tmp_path / "b.py", b"from nnsight import x\n\x00")
    other = write(tmp_path / "sub" / "c.py", NAIVE)
    done = run(tmp_path, "--in-place", "-q")
    assert done.returncode == EXIT_ERROR
    assert "3 file(s): 2 would change, 0 unchanged, 1 error(s)" in err(done)
    assert "model.session(remote=True)" in good.read_text()
    assert "model.session(remote=True)" in other.read_text()
    assert bad.read_bytes() == b"from nnsight import x\n\x00"
    assert not temp_files(tmp_path)


def test_directory_symlink_loops_do_not_hang(tmp_path):
    root = tmp_path / "tree"
    write(root / "a.py", NAIVE)
    (root / "up").symlink_to("..")
    (root / "self").symlink_to(".")
    (root / "sub").mkdir()
    (root / "sub" / "back").symlink_to(root)
    (root / "dangling.py").symlink_to(root / "nowhere.py")
    done = run(root, "--check", "-q", timeout=60)
    text = err(done)
    assert "2 file(s): 1 would change, 0 unchanged, 1 error(s)" in text, text
    assert "dangling.py: no such file" in text


def test_file_symlink_loop_is_a_one_line_error(tmp_path):
    root = tmp_path / "tree"
    write(root / "a.py", NAIVE)
    (root / "x.py").symlink_to("y.py")
    (root / "y.py").symlink_to("x.py")
    done = run(root / "x.py", timeout=60)
    assert_one_line_error(done, "x.py", "symbolic links")
    done = run(root, "--check", "-q", timeout=60)
    assert "3 file(s): 1 would change, 0 unchanged, 2 error(s)" in err(done)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_in_a_directory_does_not_block_the_run(tmp_path):
    write(tmp_path / "a.py", NAIVE)
    os.mkfifo(tmp_path / "pipe.py")
    done = run(tmp_path, "--check", "-q", timeout=60)
    assert done.returncode == 1, err(done)  # a.py would change; the FIFO is not a source file


# -- unreadable inputs ----------------------------------------------------------------------


@pytest.mark.skipif(IS_ROOT or not hasattr(os, "geteuid"), reason="root reads a chmod-000 file")
def test_unreadable_file(tmp_path):
    script = write(tmp_path / "secret.py", NAIVE)
    script.chmod(0)
    try:
        assert_one_line_error(run(script), "secret.py", "permission denied")
        done = run(tmp_path, "--check", "-q")
        assert "error(s)" in err(done) and done.returncode == EXIT_ERROR
    finally:
        script.chmod(0o644)


def test_reading_fails(tmp_path):
    """Reads that fail for everyone, root included: a directory given as a file is
    handled by directory mode, so use /proc/self/mem (EIO at offset 0) where it exists."""
    missing = tmp_path / "missing.py"
    assert_one_line_error(run(missing), "missing.py", "no such file")
    if Path("/proc/self/mem").exists():
        assert_one_line_error(run("/proc/self/mem"), "/proc/self/mem", "cannot read")


def test_read_errors_are_named(tmp_path, monkeypatch):
    """The message mapping of files.read_source, for errors root cannot provoke."""
    from ndif_opt.frontends import files

    def denied(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(files.InputError, match=r"s\.py: permission denied"):
        files.read_source(str(tmp_path / "s.py"))


# -- outputs ----------------------------------------------------------------------------------


def test_output_equal_to_input_in_any_spelling(tmp_path):
    script = write(tmp_path / "s.py", NAIVE)
    (tmp_path / "link.py").symlink_to("s.py")
    os.link(script, tmp_path / "hard.py")
    for output in ["./s.py", "link.py", "hard.py", "sub/../s.py"]:
        (tmp_path / "sub").mkdir(exist_ok=True)
        done = run("s.py", "-o", output, cwd=tmp_path)
        assert_one_line_error(done, output, "input")
    done = run("link.py", "-o", "s.py", cwd=tmp_path)
    assert_one_line_error(done, "s.py", "input")
    assert script.read_text() == NAIVE and not temp_files(tmp_path)


def test_unwritable_output_directory(tmp_path):
    script = write(tmp_path / "s.py", NAIVE)
    not_a_dir = write(tmp_path / "file", "")
    assert_one_line_error(run(script, "-o", not_a_dir / "out.py"), "out.py", "not a directory")
    if not IS_ROOT:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        try:
            assert_one_line_error(run(script, "-o", locked / "out.py"), "out.py", "permission denied")
            assert not list(locked.iterdir())
        finally:
            locked.chmod(0o755)
    assert script.read_text() == NAIVE and not temp_files(tmp_path)


def test_missing_output_directory(tmp_path):
    script = write(tmp_path / "s.py", NAIVE)
    gone = tmp_path / "gone"
    gone.mkdir()
    gone.rmdir()  # it was there a moment ago
    assert_one_line_error(run(script, "-o", gone / "out.py"), "out.py", "does not exist")
    assert not gone.exists() and script.read_text() == NAIVE


def test_output_is_a_directory(tmp_path):
    script = write(tmp_path / "s.py", NAIVE)
    target = tmp_path / "outdir"
    target.mkdir()
    assert_one_line_error(run(script, "-o", target), "outdir", "directory")
    assert not list(target.iterdir()) and not temp_files(tmp_path)


def test_failed_input_writes_no_output(tmp_path):
    bad = write(tmp_path / "bad.py", "from nnsight import LanguageModel\nwith (:\n")
    out = tmp_path / "out.py"
    assert_one_line_error(run(bad, "-o", out), "bad.py")
    assert not out.exists()
    existing = write(tmp_path / "existing.py", "keep me\n")
    assert_one_line_error(run(bad, "-o", existing), "bad.py")
    assert existing.read_text() == "keep me\n"


def test_new_output_file_gets_normal_permissions(tmp_path):
    script = write(tmp_path / "s.py", NAIVE)
    out = tmp_path / "out.py"
    assert run(script, "-o", out, "-q", umask=0o022).returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    kept = write(tmp_path / "kept.py", "")
    kept.chmod(0o640)
    assert run(script, "-o", kept, "-q").returncode == 0
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and "session" in kept.read_text()


def test_in_place_through_a_symlink_writes_the_target(tmp_path):
    real = write(tmp_path / "real.py", NAIVE)
    link = tmp_path / "link.py"
    link.symlink_to("real.py")
    assert run(link, "--in-place", "-q").returncode == 0
    assert link.is_symlink(), "the symlink was replaced by a file"
    assert "model.session(remote=True)" in real.read_text()
    assert not temp_files(tmp_path)


def test_output_to_a_fifo_is_written_not_replaced(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    script = write(tmp_path / "s.py", NAIVE)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = run(script, "-o", fifo, "-q", timeout=60)
    reader.join(timeout=30)
    assert done.returncode == 0, err(done)
    assert stat.S_ISFIFO(fifo.stat().st_mode), "the FIFO was replaced by a regular file"
    assert received and b"model.session(remote=True)" in received[0]


def test_stdin_with_bad_bytes(tmp_path):
    done = run("-", stdin=b"from nnsight import x\ny = '\xe9'\n")
    assert_one_line_error(done, "<stdin>", "utf-8")
    done = run("-", stdin=NAIVE.replace("\n", "\r\n").encode())
    assert done.returncode == 0 and b"model.session(remote=True):\r\n" in done.stdout


def test_messages_name_the_file_first(tmp_path):
    """`ndif-opt: PATH: cause` — one shape for every error, so editors can parse it."""
    bad = write(tmp_path / "bad.py", "from nnsight import LanguageModel\nwith (:\n")
    text = err(run(bad))
    assert re.match(rf"ndif-opt: {re.escape(str(bad))}: \S", text), text


def test_prefilter_skips_mentions_in_comments_without_parsing():
    from ndif_opt.engine.prefilter import uses_nnsight

    assert not uses_nnsight("# the nnsight version runs remote=True\nx = 1\n")
    assert not uses_nnsight("x = 1  # nnsight, in a trailing comment: ast-grep decides\n")
    assert uses_nnsight("# nnsight\nfrom nnsight import LanguageModel\n")
    assert uses_nnsight("# nnsight\r\nfrom nnsight import LanguageModel\r\n")
