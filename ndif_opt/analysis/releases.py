"""Which nnsight release the rewritten code must run on, and what that release refuses.

nnterp 1.3.0, the newest release, imports only with nnsight 0.6.3 (with 0.8 it fails at
import), so a script that imports nnterp runs on nnsight 0.6; other scripts target 0.8,
the release the project's ``verify`` extra pins. ``Options.nnsight`` (``nnsight = "0.6"``
in ``[tool.ndif-opt]``, ``--nnsight 0.6``) says it outright.

What nnsight 0.6 does differently, measured with its own code (``tests/nnterp_env``):

* **A remote block sees none of your local variables.** 0.6 ships the block's frame as an
  empty ``SerializedFrame``: the block's code, compiled into a function on the server,
  reads a name it never binds from the globals the request carries, but a name it binds
  is a local of that function, and ``pull()`` has nothing to fill it with. So a name the
  block reads before binding it (``results = nnsight.save(results)``, ``ids =
  torch.cat([ids, ...])`` in a loop) is unbound there: ``UnboundLocalError``. 0.8 ships the
  frame's variables and runs the same code. :func:`unbound_on_server` lists those names.
* **Invokes of one trace do not each see their own row** as 0.8's do: batched, the same
  read-out gives other values (tiny GPT-2, examples/batched_prompts.py: a logit
  difference of 0.121 alone, 0.205 batched).
"""

from __future__ import annotations

import re

from ndif_opt.analysis.facts import Block, Facts, Remote
from ndif_opt.analysis.names import collect, exposed_reads

NNSIGHT_06 = "0.6"
NNSIGHT_08 = "0.8"
RELEASES = (NNSIGHT_08, NNSIGHT_06)

# `import nnterp`, `from nnterp... import` at the start of a line (a notebook's cells too)
_NNTERP_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+nnterp\b|import[ \t]+nnterp\b)", re.MULTILINE)


def release_rules(value: str) -> str:
    """The rules (one of :data:`RELEASES`) for the nnsight release ``value`` names: any
    0.5+ release, with or without its patch number. 0.8.x runs 0.8's; every other release
    runs 0.6's, the stricter ones (measured on 0.6.3: a block sees no local variable of
    yours, invokes do not each see their own row), since what it does has not been
    measured here. ValueError for what is not a 0.5+ release."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?\S*\s*", str(value))
    if match is None:
        raise ValueError(f"not an nnsight release: {value!r} (write it as 0.8 or 0.6.3)")
    version = (int(match.group(1)), int(match.group(2)))
    if version < (0, 5):
        raise ValueError(f"nnsight {value} is older than 0.5: run with --migrate to rewrite the script for 0.5+")
    return NNSIGHT_08 if version == (0, 8) else NNSIGHT_06


def target_release(requested: str, source: str) -> str:
    """The release the rewrite targets: the one asked for, else 0.6 for a script that
    imports nnterp, else 0.8."""
    if requested:
        return requested
    return NNSIGHT_06 if _NNTERP_IMPORT.search(source) else NNSIGHT_08


def outermost_remote_blocks(facts: Facts):
    """The blocks whose code the server runs as a function of its own (0.6's request)."""
    return [b for b in facts.blocks if b.parent is None and b.remote.state is not Remote.NO]


def read_before_bound(block: Block) -> set[str]:
    """Names the block reads before binding them and also binds."""
    exposed = exposed_reads(list(block.node.body.body))
    return {name for name in collect(block.node.body).binds if name in exposed} if exposed else set()


def unbound_on_server(facts: Facts) -> frozenset[str]:
    """Names an outermost remote block reads before binding them and also binds: on
    nnsight 0.6 they are unbound when the server runs the block."""
    found: set[str] = set()
    for block in outermost_remote_blocks(facts):
        found |= read_before_bound(block)
    return frozenset(found)
