"""Short descriptions of saved values for findings: "`[1, 9, 128256] bfloat16` (2.3 MB)"."""

from __future__ import annotations

import functools

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts


def saved_shape(expr: cst.BaseExpression, block: Block, facts: Facts) -> str:
    """The estimated shape and size of ``expr`` saved in ``block``, or "" if unknown."""
    tools = _tools()
    info = facts.models.get(block.model)
    dims = tools.dims_for(info.repo_id if info is not None and info.repo_id else block.model)
    trace = block if block.method != "session" else None
    seq = tools.prompt_tokens(trace.call, facts, tools.default_options) if trace is not None else 16
    try:
        shape = tools.shape_of(expr, dims, model_name=list(facts.models) or ["model"], seq_len=seq)
    except Exception:  # a description is optional; never let it break a rewrite
        return ""
    if shape.nbytes is None or shape.kind == "unknown":
        return ""
    return f"{shape.describe()}, ~{tools.human_bytes(shape.nbytes)} on {dims.name}"


class _Tools:
    """What a description uses, imported on first use (the cost model imports the
    passes' modules) and looked up once, not at every call."""

    def __init__(self) -> None:
        from ndif_opt.cost.model_registry import dims_for
        from ndif_opt.cost.shapes import shape_of
        from ndif_opt.cost_model import prompt_tokens
        from ndif_opt.options import Options
        from ndif_opt.output.text import human_bytes

        self.prompt_tokens = prompt_tokens
        self.dims_for = dims_for
        self.default_options = Options()  # frozen: one instance serves every call
        self.human_bytes = human_bytes
        self.shape_of = shape_of


@functools.lru_cache(maxsize=1)
def _tools() -> _Tools:
    return _Tools()
