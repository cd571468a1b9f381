"""Static cost model: what a script costs on NDIF — requests, bytes, forward passes, time.

The model walks the script once, in order, as an abstract interpreter:

* **client code** binds names to shapes (:mod:`ndif_opt.cost.shapes`) and constants, so that a
  tensor computed on the client (``steering = positive - negative``) is known when a later
  request reads it (and re-uploads it), and a prompt in a variable is still a known string;
* **loops** multiply what they contain by their trip count — ``range`` with constants,
  ``len()`` of literal lists and of module containers (``len(model.model.layers)``),
  ``enumerate``/``zip``, nested loops; a loop over literal strings (prompts) is unrolled so
  every prompt has its own length; a list the script fills in place
  (``prompts.append(p)``) has the length of what it adds where that is known. A loop
  whose length is not known before the script runs (rows of a file, a ``while``) is not
  guessed: it multiplies by its own symbol ``N`` (:class:`ndif_opt.types.UnknownLoop`),
  and every number it reaches is a :class:`ndif_opt.types.Count` — ``1 + 2·N`` requests.
  A plan that needs one number (session-chunking) takes ``N`` at the ``unknown-trips``
  setting and says so. A retry loop (:func:`ndif_opt.analysis.retries.retry_guard`)
  counts one attempt, with a note;
* a call of a function of the same file is walked at the call (its requests count once per
  call); a function code here only hands on (a callback, an entry point) is walked once;
  a function no code here names (:mod:`ndif_opt.analysis.reachability`) costs nothing,
  and a note tells what one call of it would send;
* every **outermost remote block** is one request: its upload (request base, the module
  tree's references, the block's code, every client tensor the block reads), its
  download (``torch.save`` of the saved values), its forward passes (one per trace however
  many invokes; ``max_new_tokens`` per generate; a session's are its traces', also those
  of a model the analysis cannot tell is one, such as a parameter), its decoder-layer
  evaluations (every layer of every forward pass, less the layers replaced by ``.skip()``
  and those after a ``tracer.stop()``), its compute (2 × parameters × tokens per pass —
  the tokens of every invoke, padded to the longest — less the parameters of the layers
  not evaluated) and its server time.

What the download counts — the server's ``torch.save`` of ``{name: value}`` for every
*name* bound to a saved value in the block's frame (a saved value appended to a client
list is not a name there and is not returned) — and the framing it adds (about 1.3 KB a
result, 225 B a tensor) were measured against nnsight 0.8 / torch 2.13. A value whose size
the shapes cannot tell adds its framing only and is listed, with the code that computes it
and why, in ``Cost.download_unknown``: the report shows such a download as a lower bound.

**Views.** NDIF's server runs on GPU and moves each saved tensor with ``.to("cpu")``, which
copies only the view: ``logits[0, -1].save()`` downloads ``vocab`` elements. A CPU server
(and the in-process emulation of :mod:`ndif_opt.verify`) pickles CPU tensors as they are,
and ``torch.save`` writes a view's whole storage — once per result, however many views of
it a container holds (the rows of a trace's invokes are views of one batch output).
``Options.cost["view-storage"]`` selects ``"compact"`` (default, the GPU server) or
``"storage"`` (a CPU server / the emulation).

**Invokes.** The invokes of one trace run as one batch padded to the longest prompt: the
trace's compute counts every invoke's rows at that length, and inside an invoke the
model's values have that invoke's rows.

Every assumption is stated by :func:`assumptions` and can be overridden through
``Options.cost`` (see :data:`DEFAULTS`; also ``"models"``, ``"model-config"``,
``"prompt-tokens"`` — a mapping or a function from prompt to token count — and
``"view-storage"``). :func:`explain` returns the per-request
breakdown, the script-specific notes and the warnings (a request whose server time may
exceed NDIF's one-hour limit); :func:`estimate` only the totals.

The walk is :class:`ndif_opt.cost.walker.Walker`; the numbers are in
:mod:`ndif_opt.cost.constants`; this module totals the walk's requests into a
:class:`Cost`, and states the assumptions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import libcst as cst

from ndif_opt.analysis.facts import Block, Facts
from ndif_opt.analysis.keywords import known_keywords
from ndif_opt.analysis.regions import int_value
from ndif_opt.cost.constants import DEFAULTS, UNKNOWN_TRIPS, generated_tokens, session_budget, setting, view_mode
from ndif_opt.cost.shape_values import Shape
from ndif_opt.cost.shapes import shape_of
from ndif_opt.cost.script_models import script_model_dims
from ndif_opt.cost.requests import RequestEstimate, SessionProfile, Visit
from ndif_opt.cost.walker import Walker
from ndif_opt.options import Options
from ndif_opt.syntax.walk import find_nodes
from ndif_opt.types import Cost, Count, Number, UnknownDownload, UnknownDownloads, UnknownLoop, is_known, loops_in
from ndif_opt.wording import counted_with_loops, human_bytes

__all__ = [
    "DEFAULTS",
    "Estimate",
    "RegionRequests",
    "RequestEstimate",
    "SessionProfile",
    "UNKNOWN_TRIPS",
    "assumptions",
    "estimate",
    "explain",
    "prompt_tokens",
    "saved_estimate",
    "saved_shape",
    "session_budget",
]


@dataclass(frozen=True)
class RegionRequests:
    """The requests a run of statements sends, as the totals count them: ``sent`` over
    the script's run, in ``runs`` runs of the statements. ``uncalled``: the function no
    code here calls that holds them — then for one call of it, which the totals leave out."""

    sent: Number | Count
    runs: Number | Count
    uncalled: str | None = None

    def per_run(self, assumed: int) -> Number:
        """Requests one run sends, a number: a loop of unknown length inside taken at
        ``assumed`` iterations (to decide, not to report)."""
        try:
            value = self.sent / self.runs if self.runs else self.sent
        except (ValueError, TypeError):
            value = _at(self.sent, assumed) / max(_at(self.runs, assumed), 1)
        return _at(value, assumed)


@dataclass
class Estimate:
    """What :func:`explain` returns."""

    cost: Cost
    requests: list[RequestEstimate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # script-specific assumptions
    warnings: list[str] = field(default_factory=list)  # requests over the time limit
    visits: dict[int, Visit] = field(default_factory=dict)  # id(statement) -> what the walk saw
    # id(statement) -> the times it runs over the script (inside requests too), and the
    # function no code here calls that holds it (then per call of it)
    runs: dict[int, tuple[Number | Count, str | None]] = field(default_factory=dict)
    # functions no code here calls -> the requests one call would send (not in the totals)
    uncalled: dict[str, Number | Count] = field(default_factory=dict)
    assumed_trips: int = 8  # N, where a number is needed (the `unknown-trips` setting)

    def request_for(self, node: cst.With) -> RequestEstimate | None:
        for request in self.requests:
            if request.block is not None and request.block.node is node:
                return request
        return None

    def region(self, statements) -> RegionRequests | None:
        """The requests the statements (a run of one suite) send, or None when the walk
        never reached them (code after a `return`, calls nested too deep)."""
        visits = [self.visits.get(id(stmt)) for stmt in statements]
        if not visits or visits[0] is None:
            return None
        sent = sum((v.sent for v in visits if v is not None), 0)
        return RegionRequests(sent, visits[0].runs, visits[0].function)

    def runs_of(self, stmt: cst.BaseStatement) -> tuple[Number | Count, str | None] | None:
        """How many times ``stmt`` runs over the script as the totals count it (inside a
        request too), and the function no code here calls that holds it (then: per call,
        which the totals leave out); None when the walk never reached it."""
        return self.runs.get(id(stmt))

    def longest_seconds(self, request: RequestEstimate) -> tuple[float, tuple[UnknownLoop, ...]]:
        """The server time of the request's longest run, a number — with the loops of
        unknown length taken at :attr:`assumed_trips` iterations to get it (to plan by)."""
        value = request.max_server_seconds
        return _at(value, self.assumed_trips), loops_in(value)


def _at(value: Number | Count, trips: int) -> Number:
    return value if is_known(value) else value.at(trips)


def estimate(facts: Facts, options: Options) -> Cost:
    """Requests, upload and download bytes, forward passes, FLOPs and wall time."""
    return explain(facts, options).cost


def explain(facts: Facts, options: Options) -> Estimate:
    """The totals plus the per-request breakdown, notes and warnings (worked out once per
    version of the tree and options: the pipeline and session-chunking both ask)."""
    known = facts.once(_explanations)
    if known and known[0] == options:
        return known[1]
    found = _explain(facts, options)
    known[:] = (options, found)  # (options hold dicts: not a key of Facts.once)
    return found


def _explanations(facts: Facts) -> list:
    """The version's last explanation, with its options (once per version of the tree)."""
    return []


def _explain(facts: Facts, options: Options) -> Estimate:
    walker = Walker(facts, options)
    try:
        walker.run()
    except RecursionError:
        walker.note("the script is nested too deeply to follow: its cost is partial")
    except Exception as error:  # noqa: BLE001 - an estimate must never stop a rewrite
        walker.note(f"the cost model could not follow this script ({type(error).__name__}): its cost is partial")
    requests = walker.requests
    total = dict(requests=0, upload=0, download=0, forward=0, layers=0, flops=0.0, server=0.0)
    unknown: dict[UnknownDownload, int | Count] = {}
    for r in requests:
        for value, n in r.unknown_downloads.items():
            unknown[value] = unknown.get(value, 0) + n
        total["requests"] += r.count
        total["upload"] += r.upload_bytes
        total["download"] += r.download_bytes
        total["forward"] += r.forward_passes
        total["layers"] += r.layer_evaluations
        total["flops"] += r.compute_flops
        total["server"] += r.server_seconds
    seconds = (
        total["requests"] * setting(options, "latency")
        + total["upload"] / setting(options, "upload-bandwidth")
        + total["download"] / setting(options, "bandwidth")
        + total["server"]
    )
    cost = Cost(
        requests=total["requests"],
        upload_bytes=_whole(total["upload"]),
        download_bytes=_whole(total["download"]),
        forward_passes=total["forward"],
        layer_evaluations=total["layers"],
        compute_flops=total["flops"],
        seconds=round(seconds, 3),
        download_unknown=UnknownDownloads.of(unknown),
    )
    found = Estimate(cost=cost, requests=requests, notes=list(walker.notes), visits=walker.visits, runs=walker.runs,
                     uncalled=dict(walker.uncalled), assumed_trips=walker.unknown_trips)
    found.warnings = _warnings(found, options)
    if walker.uncalled:
        found.notes.append(_uncalled_note(walker.uncalled))
    return found


def _whole(value: Number | Count) -> int | Count:
    return round(value) if not is_known(value) else int(value)


def _warnings(found: Estimate, options: Options) -> list[str]:
    """Requests whose server time may exceed NDIF's limit (a loop of unknown length
    inside taken at the assumed length, and said so)."""
    warnings = []
    limit = setting(options, "session-limit")
    budget = session_budget(options)
    for r in found.requests:
        seconds, loops = found.longest_seconds(r)
        if seconds <= budget:
            continue
        what = "session" if r.kind == "session" else r.kind
        warnings.append(
            f"a {what} of `{r.model}` is estimated at {_seconds(seconds)} "
            f"of server time; NDIF stops a request after {_seconds(limit)}"
            + (" (the estimate leaves a margin of "
               f"{setting(options, 'session-margin'):.0%})" if seconds <= limit else "")
            + (f" — with {found.assumed_trips} iterations assumed of "
               + ", ".join(loop.named for loop in loops) if loops else "")
        )
    return warnings


def _uncalled_note(uncalled: dict[str, Number | Count]) -> str:
    """No code here calls these functions: what one call of each would send."""
    parts = []
    for name, requests in uncalled.items():
        text, meaning = counted_with_loops(requests, "request")
        parts.append((name, f"a call sends {text}{'; ' + meaning if meaning else ''}"))
    if len(parts) == 1:
        (name, call), = parts
        return f"no code here calls `{name}`, so its requests are not counted ({call})"
    listed = ", ".join(f"`{name}` ({call})" for name, call in parts)
    return f"no code here calls these functions, so their requests are not counted: {listed}"


def assumptions(options: Options) -> list[str]:
    view = (
        "a saved view downloads only its own elements (the GPU server copies it to the CPU)"
        if view_mode(options) == "compact"
        else "a saved view downloads its whole storage (a CPU server pickles it as it is)"
    )
    lines = [
        "a loop whose length is not known before running (rows of a file, a `while`) is counted as N "
        "iterations, N named under the table; where a plan needs a number (session-chunking), N is taken as "
        f"{int(setting(options, 'unknown-trips'))}",
        f"a prompt that is not a literal string has {int(setting(options, 'seq-len'))} tokens; "
        "a literal has about one token per 4 characters",
        f"generate makes {int(setting(options, 'max-new-tokens'))} tokens unless max_new_tokens is given",
        f"each request costs {setting(options, 'latency'):g} s of network and queue time",
        f"downloads run at {setting(options, 'bandwidth') / 1e6:g} MB/s, uploads at "
        f"{setting(options, 'upload-bandwidth') / 1e6:g} MB/s; download sizes are uncompressed, "
        "upload sizes as sent (zstd)",
        f"a forward pass takes the longer of its compute at {setting(options, 'throughput') / 1e12:g} "
        "TFLOP/s (2 × parameters × tokens, the tokens of every invoke padded to the longest) and "
        f"reading the weights once at {setting(options, 'memory-bandwidth') / 1e12:g} TB/s",
        "every forward pass evaluates every decoder layer except those replaced by `.skip()` and "
        "those after a `tracer.stop()`; a layer not evaluated costs neither compute nor weight reads",
        f"NDIF stops a request after {_seconds(setting(options, 'session-limit'))}; sessions are "
        f"planned to {_seconds(session_budget(options))}",
        view,
    ]
    if "model-config" in options.cost:
        config = options.cost["model-config"]
        dtype = config.get("torch_dtype") or config.get("dtype") if isinstance(config, Mapping) else None
        lines.append(
            "every model has the dimensions of the given config.json"
            + (f" ({dtype})" if dtype else "")
        )
    else:
        lines.append("models not in the registry get the dimensions and dtype of a registry model of their "
                     "family, the family their name or their module paths (`transformer.h`) show; "
                     "Llama-3.1-8B's (bfloat16) when neither does")
    return lines


def _seconds(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f} s"
    return f"{value:.3g} s"


def prompt_tokens(call: cst.Call, facts: Facts, options: Options) -> int:
    """Tokens of the prompt a ``model.trace(...)`` call is given (the longest row)."""
    walker = Walker(facts, options)
    rows, seq = walker.prompt_rows(call)
    return seq if rows else int(setting(options, "seq-len"))


_DEFAULT_OPTIONS = Options()  # frozen: one instance serves every description


def tokens_generated_in(block: Block, facts: Facts) -> int | None:
    """The tokens the generate block ``block`` is (or is in) makes (its `max_new_tokens=`,
    a constant of the script as the cost walk reads it, else the default); None outside a
    generate block (`tracer.result` is then the forward's output, not generated ids)."""
    while block is not None and block.method != "generate":
        block = block.parent
    if block is None:
        return None
    return generated_tokens(known_keywords(block.call, facts), lambda expr: int_value(expr, facts), _DEFAULT_OPTIONS)


def _integer_constants(expr: cst.BaseExpression, facts: Facts) -> dict[str, Shape]:
    """The names ``expr`` reads that are integer constants of the script (`SUBJ_POS = 1`):
    as indices they drop a dimension (an unknown name keeps one of length 1)."""
    found = {}
    for name in find_nodes(expr, lambda n: type(n) is cst.Name):
        value = int_value(name, facts) if name.value not in facts.models else None
        if value is not None:
            found[name.value] = Shape.python("int", value)
    return found


def saved_shape(expr: cst.BaseExpression, block: Block, facts: Facts) -> str:
    """A saved value described for a finding: the estimated shape and size of ``expr`` saved
    in ``block`` ("`[1, 9, 128256] bfloat16`, ~2.3 MB on ..."), or "" if unknown."""
    shape = saved_estimate(expr, block, facts)
    if shape is None or shape.nbytes is None or shape.kind == "unknown":
        return ""
    return f"{shape.describe()}, ~{human_bytes(shape.nbytes)} on {script_model_dims(facts, block.model).name}"


def saved_estimate(expr: cst.BaseExpression, block: Block, facts: Facts) -> Shape | None:
    """The estimated shape of ``expr`` saved in ``block``; None when it cannot be estimated."""
    dims = script_model_dims(facts, block.model)
    trace = block if block.method != "session" else None
    seq = prompt_tokens(trace.call, facts, _DEFAULT_OPTIONS) if trace is not None else 16
    try:
        return shape_of(expr, dims, model_name=list(facts.models) or ["model"], seq_len=seq,
                        env=_integer_constants(expr, facts), max_new_tokens=tokens_generated_in(block, facts))
    except Exception:  # noqa: BLE001 - an estimate is optional; never let it break a rewrite
        return None
