"""The words of nnsight and of Python that the analyses recognise, each defined once.

Which methods open an nnsight block, which mark a value to come back, which lists hold a
model's decoder layers, and which methods change the object they are called on. The
analyses (facts, def-use, windows, the cost model) and the passes read them from here.
"""

from __future__ import annotations

#: Model methods that open a block of deferred work: `with model.trace(...):`.
MODEL_BLOCK_METHODS = ("trace", "session", "generate")
#: Every method that opens an nnsight block: the model's, and a tracer's (`tracer.invoke`,
#: `tracer.iter`), including the pre-0.5 ones (`scan`, `edit`).
BLOCK_METHODS = frozenset({*MODEL_BLOCK_METHODS, "invoke", "scan", "edit", "iter"})
#: Methods of the model object itself that change it (its edits, its weights' device or
#: dtype, its mode): called outside its blocks, they change the model on your machine.
MODEL_CHANGING_METHODS = frozenset({
    "clear_edits", "dispatch", "dispatch_model", "to", "cuda", "cpu", "half", "float", "bfloat16",
    "eval", "train", "requires_grad_", "load_state_dict", "apply", "tie_weights", "resize_token_embeddings",
})
#: Methods of a value in a block that say what becomes of it (`.save()`), or of the run.
SAVE_METHODS = frozenset({"save", "skip", "stop"})

#: Attributes that hold a model's decoder layers (`model.model.layers`, `model.transformer.h`):
#: with transformers >= 5 `layers[i].output` is a tensor.
LAYER_LISTS = frozenset({"layers", "h", "layer", "blocks"})

#: Methods that change the list, dict, set or deque they are called on.
CONTAINER_MUTATORS = frozenset(
    {
        "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
        "update", "setdefault", "popitem", "add", "discard", "appendleft", "extendleft",
        "difference_update", "intersection_update", "symmetric_difference_update",
        "__setitem__", "__delitem__",
    }
)  # fmt: skip
#: Of those, the ones that put into or take out of a list or dict: what filling one looks like.
FILLING_METHODS = frozenset({"append", "extend", "insert", "update", "pop", "clear", "remove", "setdefault"})
#: Methods that put items into the container they are called on (`xs.append(v)`, `d.update(...)`).
STORING_METHODS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "appendleft"})
#: Functions (of a module, or methods of a generator) that change their first argument in
#: place: `random.shuffle(xs)`, `rng.shuffle(xs)`, `heapq.heappush(h, x)`, `bisect.insort(a, x)`
ARGUMENT_MUTATORS = frozenset(
    {
        "shuffle", "heappush", "heappop", "heapify", "heappushpop", "heapreplace", "insort", "insort_left",
        "insort_right",
    }
)  # fmt: skip
#: Methods that change the file, stream or queue they are called on.
STREAM_MUTATORS = frozenset({"write", "writelines", "close", "seek", "truncate", "send", "put"})
#: Methods that draw from a random generator (numpy's Generator and RandomState, random.Random,
#: torch.Generator): each draw advances the generator, so it changes the object it is called on.
RANDOM_DRAWS = frozenset(
    {
        "random", "uniform", "normal", "standard_normal", "integers", "randint", "choice", "choices",
        "shuffle", "permutation", "permuted", "sample", "gauss", "normalvariate", "rand", "randn",
        "random_sample", "randrange", "binomial", "poisson", "exponential", "beta", "gamma",
        "multinomial", "dirichlet", "bytes", "getrandbits", "seed", "manual_seed", "set_state",
    }
)  # fmt: skip
#: Builtins that change the iterator they are given (`next(it)` advances it).
ADVANCING_BUILTINS = frozenset({"next"})
#: Methods that convert a tensor into a value that downloads larger and holds no more:
#: `.tolist()` (a Python float per element), `.float()`/`.double()` (bf16 widened).
#: Computed on your machine from the tensor, they give the same value.
WIDENING_CONVERSIONS = frozenset({"tolist", "float", "double"})
#: Methods that change the object they are called on, whatever it is.
MUTATING_METHODS = CONTAINER_MUTATORS | STREAM_MUTATORS

#: Methods of an object a library class made (`probe = torch.nn.Linear(...)`) that only read
#: it; any other method may change it (`opt.step()`, `probe.float()`, `counts.subtract(c)`).
READING_METHODS = frozenset(
    {
        "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
        "modules", "named_modules", "state_dict", "get", "keys", "values", "items", "copy", "count",
        "index", "most_common", "total", "elements", "tolist", "numel", "dim", "size", "extra_repr",
        "__len__", "__contains__", "__getitem__",
    }
)
