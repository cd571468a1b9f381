"""Did a change alter any output? For refactors and speed work, which must change nothing.

    python benchmarks/golden.py record FILE   # before the change: optimize() over the corpus
    python benchmarks/golden.py check FILE    # after it: compare (exit 1, the first differences)

The corpus: every example (with and without unsafe fixes), the examples one after another,
a dense 300-line script, a dense 700-line one (its windows in two processes, where the
pipeline can fork), every pass case (that pass alone, and all passes), and 200 Hypothesis
scripts (derandomized: the same ones every time), and, when they are next to the checkout,
the .py files of ../shared/devset and ../shared/corpus (default, unsafe, and --migrate for the
corpus; read only). Compared: code, findings with their
ranges, per-pass costs, edits, notes, unreturned and introduced names. About 15 s.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from generators import dense_nnsight_script  # noqa: E402

from ndif_opt import optimize  # noqa: E402
from ndif_opt.passes import PASSES  # noqa: E402

UNSAFE = {"unsafe_fixes": True}


def corpus() -> list[tuple[str, str, dict]]:
    """(name, source, optimize() keyword arguments) of every input."""
    items = []
    examples = sorted((ROOT / "examples").glob("*.py"))
    for path in examples:
        items += [(path.name, path.read_text(), {}), (f"{path.name}:unsafe", path.read_text(), UNSAFE)]
    items.append(("cells", "\n".join(p.read_text() for p in examples), {}))
    dense = dense_nnsight_script(300)
    items += [("dense-300", dense, {}), ("dense-300:unsafe", dense, UNSAFE)]
    items.append(("dense-700:jobs-2", dense_nnsight_script(700), {"jobs": 2}))
    for cls in PASSES:
        for i, case in enumerate(cls.cases):
            # named, so a case added before another does not shift what it is compared with
            key, flags = case.name or i, {"unsafe_fixes": case.unsafe_fixes}
            if getattr(case, "notebook", False):
                flags["notebook"] = True
            items.append((f"case:{cls.id}:{key}", case.before, {"select": [cls.id], **flags}))
            items.append((f"case-all:{cls.id}:{key}", case.before, flags))
    for folder, modes in (("devset", ("", "unsafe")), ("corpus", ("", "unsafe", "migrate"))):
        for path in sorted((ROOT.parent / "shared" / folder).glob("*.py")):
            for mode in modes:
                flags = {"unsafe": UNSAFE, "migrate": {"migrate": True}}.get(mode, {})
                items.append((f"{folder}:{path.name}:{mode}", path.read_text(), flags))
    for i, text in enumerate(_generated_scripts(200)):
        items.append((f"hyp:{i}", text, {}))
        if i % 3 == 0:
            items.append((f"hyp:{i}:unsafe", text, UNSAFE))
    return items


def _generated_scripts(count: int) -> list[str]:
    from hypothesis import HealthCheck, given, settings
    from strategies import scripts

    texts: list[str] = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(scripts(max_segments=4))
    def collect(script) -> None:
        texts.append(script.source)

    collect()
    return texts


def summary(result) -> dict:
    return {
        "code": result.code,
        "findings": [[f.pass_id, f.message, str(f.range), str(f.status), str(f.safety), f.reason]
                     for f in result.findings],
        "costs": [[c.pass_id, repr(c.before), repr(c.after)] for c in result.costs],
        "edits": [[str(e.range), e.new_text] for e in result.edits],
        "unreturned": list(result.unreturned),
        "introduced": list(result.introduced),
        "assumptions": list(result.assumptions),
    }


def run() -> dict:
    outputs = {}
    started = time.perf_counter()
    items = corpus()
    for name, source, options in items:
        try:
            outputs[name] = summary(optimize(source, **_arguments(options)))
        except Exception as error:  # noqa: BLE001 - a crash is an output too
            outputs[name] = {"error": repr(error)}
    print(f"{len(items)} inputs in {time.perf_counter() - started:.1f} s")
    return outputs


def _arguments(options: dict) -> dict:
    """``jobs`` and ``notebook`` go in an Options (a commit from before Options.jobs runs in
    one process: results do not depend on it)."""
    from ndif_opt.options import Options

    options = dict(options)
    jobs = options.pop("jobs", 1)
    if jobs > 1 and "jobs" in Options.__dataclass_fields__:
        options["options"] = Options(jobs=jobs)
    if options.pop("migrate", False):
        options["options"] = Options(migrate=True)
    if options.pop("notebook", False):
        select = options.pop("select", None)
        options["options"] = Options(select=frozenset(select) if select else None, notebook=True,
                                     unsafe_fixes=options.pop("unsafe_fixes", False))
    return options


def check(recorded: dict, outputs: dict, shown: int = 10) -> int:
    differ = [name for name in recorded if recorded[name] != outputs.get(name)]
    for name in differ[:shown]:
        before, after = recorded[name], outputs.get(name) or {}
        fields = [k for k in before if before.get(k) != after.get(k)]
        print("DIFF", name, fields)
        for field in fields[:2]:
            print("  before:", str(before.get(field))[:600])
            print("  after: ", str(after.get(field))[:600])
    print(f"{len(differ)} of {len(recorded)} differ")
    return 1 if differ else 0


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in ("record", "check"):
        sys.exit(__doc__)
    mode, path = sys.argv[1], Path(sys.argv[2])
    outputs = run()
    if mode == "record":
        path.write_text(json.dumps(outputs, indent=0))
    else:
        sys.exit(check(json.loads(path.read_text()), outputs))


if __name__ == "__main__":
    main()
