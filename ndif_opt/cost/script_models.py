"""The dimensions of a script's model, from what the script says of it: its repo id, or,
when the repo is not written in the file (`LanguageModel(args.model)`), the family its code
shows (the decoder layers it reads: `model.transformer.h` is GPT-2's)."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.analysis.vocabulary import LAYER_LISTS
from ndif_opt.cost.model_registry import ModelDims, dims_for, dims_of_family, family_of_layer_list, guess_family
from ndif_opt.syntax.expressions import dotted_name
from ndif_opt.syntax.walk import find_nodes


def script_model_dims(facts: Facts, model: str) -> ModelDims:
    """The dimensions of the model the script's name ``model`` holds."""
    info = facts.models.get(model)
    repo = info.repo_id if info is not None and info.repo_id else model
    dims = dims_for(repo)
    if dims.known or guess_family(repo) != "unknown":
        return dims
    # no name to go by, but the layers it reads may say which family (the default is
    # Llama-3.1-8B's dimensions)
    family = facts.once(_layer_list_families).get(model)
    return dims if family is None else dims_of_family(repo, family)


def _layer_list_families(facts: Facts) -> dict[str, str]:
    """Name -> the family of the model it holds, as the decoder layers the code reads of it
    show (`model.transformer.h[3]`: GPT-2's), when they show one family (once per version)."""
    seen: dict[str, set[str]] = {}
    for node in find_nodes(facts.module, lambda n: type(n) is cst.Attribute and n.attr.value in LAYER_LISTS):
        parts = (dotted_name(node) or "").split(".")
        family = family_of_layer_list(".".join(parts[-2:])) if len(parts) > 2 else None
        if family is not None:
            seen.setdefault(".".join(parts[:-2]), set()).add(family)
    return {name: families.pop() for name, families in seen.items() if len(families) == 1}


__all__ = ["script_model_dims"]
