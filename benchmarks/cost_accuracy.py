"""The static cost model against measurement: predicted vs measured, script by script.

For every example (``examples/*.py``) and every script in ``benchmarks/cost_scripts/``,
the original and its optimized form are run through the NDIF emulation on the tiny
models of :mod:`ndif_opt.verify` (``verify_sources``), and the cost model is evaluated
on the same source *at the tiny models' dimensions*: hidden 64, vocabulary 512, fp32,
the real layer count, every literal prompt's real token count from the tiny tokenizer,
and views downloading their whole storage (the emulation runs on the CPU, see
``ndif_opt.cost_model``). Requests must match exactly; the download estimate must be
within ±25% of the measured uncompressed result size (or ±4 KB for small results).

    python benchmarks/cost_accuracy.py            # the table (markdown)
    python benchmarks/cost_accuracy.py --json     # the rows as JSON

``tests/test_cost_accuracy.py`` asserts the same table.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import libcst as cst

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

from ndif_opt import optimize  # noqa: E402
from ndif_opt.analysis import analyze  # noqa: E402
from ndif_opt.cost_model import explain  # noqa: E402
from ndif_opt.options import Options  # noqa: E402

TOLERANCE = 0.25  # relative
SMALL = 4096  # bytes: absolute tolerance for small results (framing dominates)


def scripts() -> list[Path]:
    """The examples and the extra accuracy scripts, by path."""
    found = sorted((ROOT / "examples").glob("*.py"))
    found += sorted((ROOT / "benchmarks" / "cost_scripts").glob("*.py"))
    return found


def tiny_options(source: str, **cost) -> Options:
    """Cost options that describe the tiny models :mod:`ndif_opt.verify` runs."""
    from ndif_opt.verify.tiny_models import HIDDEN, MAX_POSITIONS, build_tokenizer, model_spec

    module = cst.parse_module(source)
    facts = analyze(module, assume_remote=True)
    tokenizer = build_tokenizer()
    vocab = len(tokenizer)
    models = {}
    for info in facts.models.values():
        if not info.repo_id:
            continue
        spec = model_spec(info.repo_id)
        gpt2 = spec.family == "gpt2"
        models[info.repo_id] = {
            "family": "gpt2" if gpt2 else "llama",
            "n_layers": spec.n_layers,
            "hidden_size": HIDDEN,
            "vocab_size": vocab,
            "n_heads": 4,
            "n_kv_heads": 4 if gpt2 else 2,
            "intermediate_size": (4 if gpt2 else 2) * HIDDEN,
            "max_position": MAX_POSITIONS,
            "dtype": "float32",
            "tie_word_embeddings": gpt2,
        }
    prompts = {}
    for node in _strings(module):
        prompts[node] = len(tokenizer(node)["input_ids"])
    return Options(cost={"models": models, "prompt-tokens": prompts, "view-storage": "storage", **cost})


def _strings(module: cst.Module) -> set[str]:
    found: set[str] = set()

    class Finder(cst.CSTVisitor):
        def visit_SimpleString(self, node: cst.SimpleString) -> None:
            value = node.evaluated_value
            if isinstance(value, str):
                found.add(value)

        def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> None:
            value = node.evaluated_value
            if isinstance(value, str):
                found.add(value)

    module.visit(Finder())
    return found


@dataclass
class Row:
    script: str
    version: str  # "original" | "optimized"
    requests_predicted: int
    requests_measured: int
    download_predicted: int
    download_measured: int  # uncompressed result bytes (torch.save), all requests
    upload_predicted: int
    upload_measured: int  # as sent (zstd)
    forward_predicted: int
    forward_measured: int
    error: str | None = None  # the emulated run failed (then only shown, not checked)

    @property
    def requests_ok(self) -> bool:
        return self.requests_predicted == self.requests_measured

    @property
    def download_ok(self) -> bool:
        return within(self.download_predicted, self.download_measured)

    @property
    def checked(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(requests_ok=self.requests_ok, download_ok=self.download_ok)
        return data


def within(predicted: float, measured: float) -> bool:
    return abs(predicted - measured) <= max(TOLERANCE * measured, SMALL)


def predict(source: str, options: Options):
    facts = analyze(cst.parse_module(source), assume_remote=options.assume_remote)
    return explain(facts, options)


def measure(path: Path, options: Options | None = None) -> list[Row]:
    """Rows for the original and the optimized script (``options`` steer the optimizer)."""
    from ndif_opt.verify import run_script

    source = path.read_text()
    result = optimize(source, **(_optimize_kwargs(options) if options else {}))
    rows = []
    for version, code in (("original", source), ("optimized", result.code)):
        run = run_script(code, filename=path.name, mode="emulated")
        predicted = predict(code, tiny_options(code)).cost
        rows.append(
            Row(
                script=path.stem,
                version=version,
                requests_predicted=predicted.requests,
                requests_measured=len(run.requests),
                download_predicted=predicted.download_bytes,
                download_measured=run.download_raw_bytes,
                upload_predicted=predicted.upload_bytes,
                upload_measured=run.upload_bytes,
                forward_predicted=predicted.forward_passes,
                forward_measured=run.forward_passes,
                error=(run.error or "").split("\n", 1)[0][:120] or None,
            )
        )
    return rows


def _optimize_kwargs(options: Options) -> dict:
    return {"options": options}


def table(rows: list[Row]) -> str:
    """A markdown table: predicted vs measured requests, download, upload, forward passes."""
    head = (
        "| script | version | requests pred / meas | download pred | download meas | Δ download "
        "| upload pred | upload meas | forward pred / meas | ok |\n"
        "|---|---|---|---:|---:|---:|---:|---:|---|---|\n"
    )
    lines = []
    for r in rows:
        delta = (r.download_predicted - r.download_measured) / r.download_measured if r.download_measured else 0.0
        if not r.checked:
            ok = "not checked: fails remotely"
        else:
            ok = "✓" if r.requests_ok and r.download_ok else "✗"
        lines.append(
            f"| {r.script} | {r.version} | {r.requests_predicted} / {r.requests_measured} "
            f"| {r.download_predicted:,} | {r.download_measured:,} | {delta:+.1%} "
            f"| {r.upload_predicted:,} | {r.upload_measured:,} "
            f"| {r.forward_predicted} / {r.forward_measured} | {ok} |"
        )
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rows = [row for path in scripts() for row in measure(path)]
    if "--json" in argv:
        print(json.dumps([r.to_dict() for r in rows], indent=2))
    else:
        print(table(rows))
    bad = [r for r in rows if r.checked and not (r.requests_ok and r.download_ok)]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
