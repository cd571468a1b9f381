"""Counted nouns in messages: one home for "1 forward pass" / "3 forward passes".

A message is a function of typed data; its numbers can be 0, 1 or many (a setting of
1, a loop of one iteration), and each must read right.
"""

from __future__ import annotations

import re

# nouns whose plural is not the singular + "s"
_IRREGULAR = {"forward pass": "forward passes", "batch": "batches"}


def plural(noun: str) -> str:
    return _IRREGULAR.get(noun, noun + "s")


def counted(n: int, noun: str) -> str:
    """`0 forward passes`, `1 forward pass`, `3 forward passes`, `1,024 tokens`."""
    return f"{n:,} {noun if n == 1 else plural(noun)}"


def per(n: int, noun: str) -> str:
    """`one per iteration` / `one per 32 iterations`."""
    return f"one per {noun}" if n == 1 else f"one per {counted(n, noun)}"


# message shapes that are always a rendering mistake (checked over the corpus and tests)
BROKEN_TEMPLATES = {
    "zero of a plural": r"\bthese 0\b|\b0 consecutive\b",
    "1 with a plural": r"(?<![\d.,])\b1 (?:requests|blocks|consecutive remote blocks|forward passes|iterations|"
                       r"traces|sessions|back-to-back sessions|invokes|layers|tokens|values|calls|times|"
                       r"statements|uses|lines)\b",
    "a plural verb after 1": r"\b1 \w+ (?:\w+ )?(?:blocks|traces) sends\b",
    "a phrase said twice": r"\b((?:\w+ ){2,}\w+), \1\b|\bper (\w+), one per \2\b",
    "an unrendered value": r"\{[a-z_]+\}|\bNone\b|``",
    "doubled punctuation": r"(?<!\.)\.\.(?!\.)|,,|, ,|;;|: :",
    "a reason completed twice": r"your machine[^.;]*, which must run on your machine",
}


def broken_template(message: str) -> str | None:
    """The name of the broken template ``message`` matches, if any."""
    for name, pattern in BROKEN_TEMPLATES.items():
        if re.search(pattern, message):
            return name
    return None
