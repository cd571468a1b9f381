"""Counted nouns in messages: one home for "1 forward pass" / "3 forward passes" (and
for sizes: "279.6 KB").

A message is a function of typed data; its numbers can be 0, 1 or many (a setting of
1, a loop of one iteration), and each must read right.
"""

from __future__ import annotations

import re

from ndif_opt.types import Count, Number, UnknownLoop, default_names, loops_in

# nouns whose plural is not the singular + "s"
_IRREGULAR = {"forward pass": "forward passes", "batch": "batches"}


def plural(noun: str) -> str:
    return _IRREGULAR.get(noun, noun + "s")


def counted(n: int, noun: str) -> str:
    """`0 forward passes`, `1 forward pass`, `3 forward passes`, `1,024 tokens`."""
    return f"{n:,} {noun if n == 1 else plural(noun)}"


def number_text(value: Number) -> str:
    """``1,024``, ``2.5``: a count as a message writes it."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.3g}"


def human_bytes(count: Number | Count, names: dict[UnknownLoop, str] | None = None) -> str:
    """``279.6 KB``; ``1.3 KB + 45.2 KB·N`` where it depends on a loop of unknown length."""
    if isinstance(count, Count):
        return count.text(human_bytes, names)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} TB"


def count_text(value: Number | Count, names: dict[UnknownLoop, str] | None = None, number=number_text) -> str:
    """``3``, ``N``, ``1 + 2·N``: a number of the bill, a loop of unknown length by its
    symbol (``names``; default N, or N₁, N₂, …)."""
    if isinstance(value, Count):
        return value.text(number, names)
    return number(value)


def loop_meanings(loops, names: dict[UnknownLoop, str]) -> str:
    """``N: the iterations of `for row in rows``` (and the others, joined)."""
    return "; ".join(f"{names[loop]}: the iterations of {loop.named}" for loop in loops)


def symbols(*values: Number | Count) -> tuple[dict[UnknownLoop, str], str]:
    """(the symbols of the loops of unknown length the counts of one message depend on,
    what they mean: ``N: the iterations of `for x in xs``` — "" when there are none)."""
    loops = loops_in(*values)
    names = default_names(loops)
    return names, loop_meanings(loops, names)


def counted_with_loops(value: Number | Count, noun: str, names: dict[UnknownLoop, str] | None = None) -> tuple[str, str]:
    """(``2·N requests``, ``N: the iterations of `for x in xs```): a count in a message
    that stands on its own, with what its symbols mean ("" when it has none; not given
    when ``names`` are: the message's :func:`symbols`)."""
    meaning = ""
    if names is None:
        names, meaning = symbols(value)
    return f"{count_text(value, names)} {noun if value == 1 else plural(noun)}", meaning


def claim_text(before: Number | Count, after: Number | Count, noun: str) -> tuple[str, str]:
    """(``7·N requests → N``, ``N: the iterations of `for x in xs```): a change a fix
    makes, with what its symbols mean ("" when it has none)."""
    names, meaning = symbols(before, after)
    return f"{count_text(before, names)} {noun if before == 1 else plural(noun)} → {count_text(after, names)}", meaning


def per(n: int, noun: str) -> str:
    """`one per iteration` / `one per 32 iterations`."""
    return f"one per {noun}" if n == 1 else f"one per {counted(n, noun)}"


# An applied fix's message is read at two moments: where the output holds the fix ("wrapped
# this loop in one session"), and where nothing was written — the editor on the file as it
# is, `--diff`, a report — where it is a proposal ("would wrap this loop in one session").
# A pass writes each phrase that changes with the moment as tense(done, proposed), once, in
# the one message it builds; the pass's context splits the message into both wordings
# (split_tenses), which every finding carries (Finding.worded picks one). The marks are
# private-use characters: they never leave the pass's context.
_DONE, _OR, _END = "\ue000", "\ue001", "\ue002"
_TENSED = re.compile(f"{_DONE}([^{_OR}]*){_OR}([^{_END}]*){_END}")


def tense(done: str, proposed: str) -> str:
    """A phrase of an applied fix's message in both wordings: ``tense("wrapped", "would wrap")``."""
    return f"{_DONE}{done}{_OR}{proposed}{_END}"


def split_tenses(message: str) -> tuple[str, str | None]:
    """(the message as done, as proposed): None for the proposal when no phrase of it
    changes with the moment."""
    if _DONE not in message:
        return message, None
    return _TENSED.sub(r"\1", message), _TENSED.sub(r"\2", message)


def proposed(message: str) -> str:
    """The message as a proposal (a fix not applied)."""
    return split_tenses(message)[1] or message


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
    "the tool in the first person": r"(?<![`'\"])\bI (?:do|did|can|cannot|could|would|will|am|know|see)\b",
}


def broken_template(message: str) -> str | None:
    """The name of the broken template ``message`` matches, if any."""
    for name, pattern in BROKEN_TEMPLATES.items():
        if re.search(pattern, message):
            return name
    return None
