"""Adding an item to a comma-separated list (a call's arguments, a function's
parameters) in the layout the list already has.

`f(a, b)` becomes `f(a, b, new)`; a list written one item per line with a trailing comma
(black's "magic trailing comma") stays so:

    def f(                    def f(
        a,                        a,
        b=1,          →           b=1,
    ):                            new=True,
                              ):

Without this, the new item came after the old trailing comma's line break, at column 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import libcst as cst

Item = TypeVar("Item", cst.Arg, cst.Param)

# the whitespace after an item, before its comma or the closing parenthesis
_AFTER = {cst.Arg: "whitespace_after_arg", cst.Param: "whitespace_after_param"}


def appended(items: Sequence[Item], new: Item, opening: cst.BaseParenthesizableWhitespace) -> list[Item]:
    """``items`` and ``new`` after them. ``opening``: the whitespace after the list's
    opening parenthesis (a call's ``whitespace_before_args``, a function's
    ``whitespace_before_params``), which separates a lone item from a new one like it."""
    if not items:
        return [new]
    last = items[-1]
    # the comma that separates items in this list, when it has two
    separator = items[-2].comma if len(items) > 1 and isinstance(items[-2].comma, cst.Comma) else None
    if not isinstance(last.comma, cst.Comma):
        between = cst.MaybeSentinel.DEFAULT if separator is None else separator
        space = _AFTER[type(last)]
        if isinstance(getattr(last, space), cst.ParenthesizedWhitespace):
            # `f(a, b\n)`: the line break before the parenthesis stays there, after `new`
            new = new.with_changes(**{space: getattr(last, space)})
            last = last.with_changes(**{space: cst.SimpleWhitespace("")})
        return [*items[:-1], last.with_changes(comma=between), new]
    # a trailing comma: the new item takes it (and the line break before the parenthesis);
    # the old last item takes the comma that separates items in this list
    between = cst.Comma(whitespace_after=opening) if separator is None else separator
    return [*items[:-1], last.with_changes(comma=between), new.with_changes(comma=last.comma)]
