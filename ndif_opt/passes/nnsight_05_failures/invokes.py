"""nnsight-05-failures: a name read in an invoke before an earlier invoke has bound it."""

from __future__ import annotations

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.invoke_order import early_cross_invoke_reads
from ndif_opt.passes.base import Context
from ndif_opt.passes.nnsight_05_failures.reports import report_failure


def report_early_cross_invoke_reads(facts: Facts, context: Context) -> None:
    for read in early_cross_invoke_reads(facts):
        message = (f"`{read.name}` is read in this invoke before it asks for a module's value, but an earlier "
                   "invoke binds it at a module: nnsight 0.5+ runs each invoke's code up to its first module "
                   f"before the model reaches any, so the read raises NameError: name '{read.name}' is not defined")
        report_failure(context, read.node, message,
                       "ask for the module's value first (`h = layer.output`, then `h[:, -1] = "
                       f"{read.name}`): the invoke then waits there until the earlier one has bound it")
