"""Library functions that send NDIF requests of their own: nnterp's helpers.

``collect_token_activations_batched(model, prompts, batch_size, remote=True)`` opens its
own ``model.session(remote=True)``; ``run_prompts(model, prompts, remote=True)`` opens one
``model.trace(batch, remote=True)`` per ``batch_size`` prompts. The script shows only the
call, so what one call sends is written down here, read from nnterp 1.3.0's source
(``nnterp/nnsight_utils.py``, ``nnterp/prompt_utils.py``): how many requests, how many
forward passes, and what comes back.

Downloads are what the helper saves and returns: the last token's hidden state at each
layer asked for (``[layers, prompts, hidden]``), or the next token's probabilities
(``[prompts, vocab]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import libcst as cst


class Returns(str, Enum):
    """What a helper downloads."""

    LAST_TOKEN_ACTIVATIONS = "last-token-activations"  # [layers, prompts, hidden]
    NEXT_TOKEN_PROBS = "next-token-probs"  # [prompts, vocab]


@dataclass(frozen=True)
class LibraryRequest:
    """How one library function sends requests when its ``remote=`` flag is on."""

    path: str  # qualified: nnterp.prompt_utils.run_prompts
    parameters: tuple[str, ...]  # in order, after the model
    returns: Returns
    batch_size: int | None = None  # default of `batch_size`; None: no batching
    session_flag: str | None = None  # the parameter that puts every batch in one session
    session_default: bool = False  # the batches run in one session unless told otherwise
    stops_after_last_layer: bool = False  # `tracer.stop()` after the deepest layer read

    def arguments(self, call: cst.Call) -> dict[str, cst.BaseExpression] | None:
        """The call's arguments by parameter name (the model's excluded); None for a
        call with `*args`/`**kwargs` whose binding cannot be read."""
        positional = []
        keywords: dict[str, cst.BaseExpression] = {}
        for arg in call.args:
            if arg.star:
                return None
            if arg.keyword is None:
                positional.append(arg.value)
            else:
                keywords[arg.keyword.value] = arg.value
        bound = dict(zip(self.parameters, positional[1:]))
        bound.update((k, v) for k, v in keywords.items() if k in self.parameters)
        return bound


_ACTIVATIONS = ("prompts", "layers", "get_activations", "remote", "idx", "tracer")
_SESSION = ("prompts", "batch_size", "layers", "get_activations", "remote", "idx")

LIBRARY_REQUESTS: dict[str, LibraryRequest] = {
    spec.path: spec
    for spec in (
        LibraryRequest(
            "nnterp.nnsight_utils.get_token_activations", _ACTIVATIONS, Returns.LAST_TOKEN_ACTIVATIONS,
            stops_after_last_layer=True,
        ),
        LibraryRequest(
            "nnterp.nnsight_utils.collect_last_token_activations_session", _SESSION,
            Returns.LAST_TOKEN_ACTIVATIONS, batch_size=0, session_default=True, stops_after_last_layer=True,
        ),
        LibraryRequest(
            "nnterp.nnsight_utils.collect_token_activations_batched", (*_SESSION, "tqdm", "use_session"),
            Returns.LAST_TOKEN_ACTIVATIONS, batch_size=0, session_flag="use_session", session_default=True,
            stops_after_last_layer=True,
        ),
        LibraryRequest(
            "nnterp.nnsight_utils.compute_next_token_probs", ("prompt", "remote"), Returns.NEXT_TOKEN_PROBS,
        ),
        LibraryRequest(
            "nnterp.prompt_utils.run_prompts",
            ("prompts", "batch_size", "get_probs_func", "func_kwargs", "remote", "tqdm"),
            Returns.NEXT_TOKEN_PROBS, batch_size=32,
        ),
    )
}  # fmt: skip
# `batch_size=0` above: a required parameter (no default)


def library_request(path: str | None) -> LibraryRequest | None:
    """The description of the library function ``path`` names, if it sends requests."""
    return LIBRARY_REQUESTS.get(path) if path else None


def batch_count(prompts: int, batch_size: int | None) -> int:
    """Forward passes one call runs: one per batch."""
    if not batch_size:
        return 1
    return max(1, -(-prompts // batch_size))


def request_count(prompts: int, batch_size: int | None, one_session: bool) -> int:
    """Requests one call sends for ``prompts`` prompts: one session, or a trace per batch."""
    return 1 if one_session else batch_count(prompts, batch_size)
