"""libcst's parse of a module, without re-checking the nodes its parser builds.

Every libcst node checks its own fields when it is constructed (``CSTNode.__post_init__``
calls ``_validate``): right for the nodes a pass builds by hand, but redundant for the nodes
libcst's native parser builds from text it has just parsed, and ~14% of a parse. (libcst's
own comment at ``__post_init__``: "It might make more sense to move validation work into the
visitor, which would allow us to avoid validating the tree when parsing a file".)

Only the thread that is parsing skips the check: ``__post_init__`` is replaced, once, by one
that validates unless this thread is inside :func:`parse_module`, so nodes built anywhere
else (other threads of an editor server, a library caller, the passes) are checked as before.
"""

from __future__ import annotations

import threading

import libcst as cst
from libcst._nodes.base import CSTNode

_parsing = threading.local()
_install_lock = threading.Lock()


def parse_module(source: str) -> cst.Module:
    """``libcst.parse_module(source)``: the same tree, built without checking each node."""
    _install()
    _parsing.active = True
    try:
        return cst.parse_module(source)
    finally:
        _parsing.active = False


def _checked_unless_parsing(node: CSTNode) -> None:
    if not getattr(_parsing, "active", False):
        node._validate()


def _install() -> None:
    if CSTNode.__post_init__ is _checked_unless_parsing:
        return
    with _install_lock:
        if _libcst_post_init is None or CSTNode.__dict__.get("__post_init__") is not _libcst_post_init:
            return  # another libcst, or changed by someone else: every node is checked as before
        CSTNode.__post_init__ = _checked_unless_parsing


_libcst_post_init = CSTNode.__dict__.get("__post_init__")
