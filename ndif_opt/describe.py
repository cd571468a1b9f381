"""Short descriptions of saved values for findings: "`[1, 9, 128256] bfloat16` (2.3 MB)"."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis import Block, Facts


def saved_shape(expr: cst.BaseExpression, block: Block, facts: Facts) -> str:
    """The estimated shape and size of ``expr`` saved in ``block``, or "" if unknown."""
    from ndif_opt.cost_model import prompt_tokens
    from ndif_opt.model_registry import dims_for
    from ndif_opt.options import Options
    from ndif_opt.report import human_bytes
    from ndif_opt.shapes import shape_of

    info = facts.models.get(block.model)
    dims = dims_for(info.repo_id if info is not None and info.repo_id else block.model)
    trace = block if block.method != "session" else None
    seq = prompt_tokens(trace.call, facts, Options()) if trace is not None else 16
    try:
        shape = shape_of(expr, dims, model_name=list(facts.models) or ["model"], seq_len=seq)
    except Exception:  # a description is optional; never let it break a rewrite
        return ""
    if shape.nbytes is None or shape.kind == "unknown":
        return ""
    return f"{shape.describe()}, ~{human_bytes(shape.nbytes)} on {dims.name}"
