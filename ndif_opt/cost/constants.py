"""The cost model's numbers: the defaults of the settings a script's configuration may
override (prompt length, latency, bandwidths, server throughput, the session limit, ...),
the sizes measured against nnsight 0.8 / torch 2.13 (the framing ``torch.save`` adds to
a result, the bytes a request uploads), and the limits of the walk (loops unrolled,
calls followed). :func:`setting` reads a setting from ``Options.cost`` with its default.
"""

from __future__ import annotations

from ndif_opt.options import Options

__all__ = [
    "CALL_DEPTH",
    "CLIENT_TENSOR_OVERHEAD",
    "CODE_COMPRESSION",
    "DEFAULTS",
    "NAME_OVERHEAD",
    "PY_SIZES",
    "RESULT_BASE",
    "SHARED_VIEW_OVERHEAD",
    "TENSOR_OVERHEAD",
    "TRACKED_LENGTH",
    "UNKNOWN_TRIPS",
    "UNROLL_BUDGET",
    "UNROLL_LIMIT",
    "UPLOAD_BASE",
    "UPLOAD_GENERATE",
    "UPLOAD_PER_LAYER",
    "UPLOAD_RAW_BASE",
    "UPLOAD_RAW_GENERATE",
    "UPLOAD_RAW_PER_LAYER",
    "VIEW_MODES",
    "session_budget",
    "setting",
    "view_mode",
]

UNKNOWN_TRIPS = 8  # iterations assumed for a loop whose length is not known statically
DEFAULTS: dict[str, float] = {
    "seq-len": 16,  # tokens in a prompt that is not a literal string
    "latency": 2.0,  # seconds of network + queue overhead per request
    "bandwidth": 50e6,  # bytes per second downloaded
    "upload-bandwidth": 20e6,  # bytes per second uploaded
    "throughput": 100e12,  # server FLOP/s
    "memory-bandwidth": 2e12,  # bytes/s the server reads weights at (one GPU at a time)
    "max-new-tokens": 20,
    "unknown-trips": UNKNOWN_TRIPS,
    "session-limit": 3600.0,  # NDIF stops a request after this many seconds
    "session-margin": 0.25,  # share of the limit held back for what the model cannot see
}
VIEW_MODES = ("compact", "storage")

# torch.save of the result dict (torch 2.13, zip format): measured.
RESULT_BASE = 1261  # an empty result dict
TENSOR_OVERHEAD = 225  # zip record, alignment and pickle of one tensor, beyond its data
SHARED_VIEW_OVERHEAD = 32  # pickle of one more view of a storage already in the result
NAME_OVERHEAD = 5  # a dict key's pickle opcodes, beyond its characters

# a Python value in the result, by its type
PY_SIZES = {"float": 9, "number": 9, "int": 5, "bool": 2, "none": 1, "dtype": 20, "device": 20}

# RequestModel.serialize (nnsight 0.8, cloudpickle protocol 4, zstd level 6): measured on
# GPT-2 and Llama module trees of 12, 32, 80 and 126 layers.
UPLOAD_BASE = 1_700  # bytes sent for a request of an empty module tree
UPLOAD_PER_LAYER = 82  # bytes sent per decoder layer (≈13 module references)
UPLOAD_RAW_BASE = 1_712
UPLOAD_RAW_PER_LAYER = 1_800
UPLOAD_GENERATE = 1_200  # a generate request also carries its generation config
UPLOAD_RAW_GENERATE = 4_000
CODE_COMPRESSION = 0.3  # the block's source, zstd-compressed
CLIENT_TENSOR_OVERHEAD = 400  # pickling one client tensor into the request

# the walk's limits
UNROLL_LIMIT = 256  # loops over at most this many literal strings are unrolled
UNROLL_BUDGET = 4096  # iterations a walk unrolls for loops whose cost varies by iteration
CALL_DEPTH = 5  # same-file functions are followed this deep
TRACKED_LENGTH = 4 * UNROLL_LIMIT  # the longest list built in place whose length the walk follows


def setting(options: Options, key: str) -> float:
    return float(options.cost.get(key, DEFAULTS[key]))


#: the keywords of `model.generate(...)` that set how many tokens it makes
GENERATION_LENGTH_KEYWORDS = ("max_new_tokens", "max_length")


def generated_tokens(keywords, integer, options: Options) -> int:
    """The tokens a `model.generate(...)` call makes: its `max_new_tokens=` (or
    `max_length=`) among ``keywords`` (name -> expression: what the call passes,
    analysis.keywords.known_keywords) as ``integer`` resolves it (a function of an
    expression, None when not known), else the configured default."""
    for key in GENERATION_LENGTH_KEYWORDS:
        if key in keywords:
            value = integer(keywords[key])
            if value is not None:
                return max(value, 1)
    return int(setting(options, "max-new-tokens"))


def session_budget(options: Options) -> float:
    """Server seconds a session may be planned for: the limit less the safety margin."""
    margin = min(max(setting(options, "session-margin"), 0.0), 0.95)
    return setting(options, "session-limit") * (1.0 - margin)


def view_mode(options: Options) -> str:
    mode = str(options.cost.get("view-storage", "compact"))
    return mode if mode in VIEW_MODES else "compact"
