"""The execution harness new tests share: a script template, written once, run on a tiny
model of each family (GPT-2 and Llama): the original locally, the original and the
optimized script through verify's emulation of NDIF, every result compared.

A template names its model ``REPO`` and its decoder layers ``LAYERS``; ``FAMILY_KEYS``
lists the other words it may use (``SELFLAYERS`` inside a class holding the model as
``self.model``, ``LMLAYERS`` for a model named ``lm``).

    from execution import both, optimized_and_verified

    @both
    def test_something(family):
        result, report = optimized_and_verified(SCRIPT, family)
        assert report.after.requests == 1

Importing this module needs the verify extra (tests that import it are skipped without it).
"""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("nnsight")

from ndif_opt import optimize  # noqa: E402
from ndif_opt.options import Options  # noqa: E402
from ndif_opt.verify import verify_result  # noqa: E402

#: family -> (a model id verify builds tiny, the path of its decoder layers)
FAMILIES = {
    "gpt2": ("openai-community/gpt2", "model.transformer.h"),
    "llama": ("meta-llama/Llama-3.1-8B", "model.model.layers"),
}
both = pytest.mark.parametrize("family", sorted(FAMILIES))


def script(template: str, family: str) -> str:
    """The template, dedented, for one family."""
    repo, layers = FAMILIES[family]
    source = textwrap.dedent(template).replace("REPO", repo)
    source = source.replace("LMLAYERS", "lm" + layers[len("model"):]).replace("SELFLAYERS", "self." + layers)
    return source.replace("LAYERS", layers)


def optimized_and_verified(template: str, family: str, *, unsafe: bool = False, options: Options | None = None,
                           expect_ok: bool = True, let_go: frozenset[str] | None = None, **verify_options):
    """The template optimized (default mode, or ``unsafe``) and verified; unless
    ``expect_ok`` is False, the verdict must be OK and the optimized run must not raise.
    ``let_go``: the only module-level names the optimized script may leave unbound (by
    default those verify accepts: the optimizer's unreturned intermediates); every other
    name the original leaves bound is compared. Returns (Result, VerifyReport)."""
    source = script(template, family)
    options = options or Options(unsafe_fixes=unsafe)
    result = optimize(source, options=options)
    if unsafe:
        verify_options.setdefault("atol", 1e-5)  # batching: ~1e-7 in fp32 (its finding says so)
    if let_go is not None:
        verify_options["ignore_missing"] = let_go
    report = verify_result(source, result, filename="script.py", unsafe_fixes=options.unsafe_fixes, **verify_options)
    if expect_ok:
        assert report.intended_ok, report.to_text() + "\n" + result.code
        assert not report.errors["optimized"], report.errors
    return result, report
