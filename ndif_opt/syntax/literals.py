"""Python values of libcst literal nodes, read without compiling them when they are plain.

:func:`literal_value` is ``node.evaluated_value`` for an integer, float or string node,
cached per node: the shape evaluator, the cost model and the analysis read the same
literals in every version of a tree.
"""

from __future__ import annotations

import functools
from typing import Any

import libcst as cst

__all__ = ["literal_value"]


@functools.lru_cache(maxsize=8192)
def literal_value(node: cst.Integer | cst.Float | cst.SimpleString | cst.ConcatenatedString) -> Any:
    """``node.evaluated_value``: libcst compiles the literal with ``ast.literal_eval`` at
    every read. A pure function of an immutable node (hashed by identity and kept alive
    while cached); the cost model reads the same literals in every version of a tree."""
    kind = type(node)
    if kind is cst.Integer or kind is cst.SimpleString:
        plain = _plain_literal(node.value)
        if plain is not None:
            return plain
    return node.evaluated_value


def _plain_literal(text: str) -> int | str | None:
    """The value of a decimal integer (``12``) or a string without prefix, escape or
    carriage return (``"The cat"``), read without compiling it; None for any other."""
    if text.isdigit() and text.isascii():
        return int(text)
    first = text[:1]
    if (first == '"' or first == "'") and "\\" not in text and "\r" not in text:
        quote = text[:3] if text[:3] == first * 3 and len(text) >= 6 else first
        return text[len(quote) : len(text) - len(quote)]
    return None
