"""Names an invoke reads before an earlier invoke of the same trace has bound them.

nnsight 0.5+ runs the invokes of a trace as code of their own, in order, each up to the
first module value it asks for; then the model runs and serves them, module by module, in
invoke order. A name an earlier invoke binds at or after its first module read is bound
only once the model reaches that module: a later invoke that reads it before asking for a
module of its own reads it too early (`NameError`, measured on nnsight 0.8.1 in the
cross-invoke patch `layer.output[:, -1] = h_from_the_first_invoke`, whose right side Python
evaluates before the module). nnsight 0.4 recorded a graph and ran it in the model's order:
the same code worked there.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.facts import Facts, opens_invoke
from ndif_opt.analysis.names import collect
from ndif_opt.syntax.walk import find_nodes

_HOOKS = frozenset({"output", "input", "inputs"})


@dataclass(frozen=True)
class EarlyRead:
    node: cst.Name  # the read
    name: str
    invoke: cst.With  # the invoke that reads it


def early_cross_invoke_reads(facts: Facts) -> list[EarlyRead]:
    """The first such read of each invoke, in the order of the code."""
    return facts.once(_early_reads)


def _early_reads(facts: Facts) -> list[EarlyRead]:
    found: list[EarlyRead] = []
    for block in facts.blocks:
        if type(block.node.body) is not cst.IndentedBlock:
            continue
        invokes = [s for s in block.node.body.body if opens_invoke(s, block.tracer_name)]
        bound_late: set[str] = set()
        for invoke in invokes:
            if type(invoke.body) is not cst.IndentedBlock:
                continue
            if bound_late:
                read = _read_before_a_module(invoke.body.body, bound_late)
                if read is not None:
                    found.append(EarlyRead(read, read.value, invoke))
            bound_late |= _bound_after_a_module(invoke.body.body)
    return found


def _reads_a_module(node: cst.CSTNode) -> bool:
    return bool(find_nodes(node, lambda n: type(n) is cst.Attribute and n.attr.value in _HOOKS))


def _read_before_a_module(statements, names: set[str]) -> cst.Name | None:
    """A read of one of ``names`` that surely runs before the invoke's first module read:
    in a line that reads no module, or in the right side of an assignment whose right
    side reads none (Python evaluates it before the target's module)."""
    for stmt in statements:
        if type(stmt) is not cst.SimpleStatementLine:
            return None  # a loop or a branch: not followed here
        for small in stmt.body:
            value = small.value if type(small) is cst.Assign else small
            if not _reads_a_module(value):
                hit = _first_read(value, names)
                if hit is not None:
                    return hit
            if _reads_a_module(small):
                return None
    return None


def _first_read(node: cst.CSTNode, names: set[str]) -> cst.Name | None:
    reads = collect(node).reads
    for name in names:
        if name in reads:
            return reads[name]
    return None


def _bound_after_a_module(statements) -> set[str]:
    """Names the invoke binds at or after its first module read (the ones bound before
    it are bound while the invoke first runs, before any later invoke does)."""
    bound: set[str] = set()
    reached = False
    for stmt in statements:
        reached = reached or _reads_a_module(stmt)
        if reached:
            bound |= set(collect(stmt).binds)
    return bound
