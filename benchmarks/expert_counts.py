"""The expert's request count for each A1 file of the public corpus (``../shared/corpus``).

For each of the 23 files the corpus README marks A1 (a loop of remote traces or sessions):
how many requests the file sends when it runs as its author intends, and how many an NDIF
expert's rewrite of it would send, with one line why. This is my reading of each file
(issue 33); the files are third-party and are not copied here.

"As its author intends":

* a script runs its own driver (``__main__``, ``main()``, module-level code) with its
  defaults and the data it names; a file whose remote switch is off as written but whose
  author says to turn it on (``REMOTE = False`` with "set REMOTE = True ... to work
  remotely") runs with it on (``intended``: the text replacement, applied before measuring);
* a library module (no driver) gets one call of each of its remote entry points — a
  function that sends requests and that no other function of the file calls, as the cost
  model walks a library — with ``remote=True`` and the loop lengths visible in the code (a
  ``remote=False`` default the static model would take at its word is switched the same way);
* a notebook (``.ipynb``) or a ``# %%`` exercise file runs cell by cell, as written: the
  expert bundles the requests of a cell (and merges a cell whose only purpose is to feed
  the next cell's request), but does not fold every cell into one session (cells are
  numbered from 1 in the notebook's list of cells, markdown included, as ndif-opt names them);
* a pre-0.5 file (``.value``, ``nnsight.list()``, ``scan=``, ...) cannot run on today's NDIF
  as written: it is measured with ``--migrate`` (issue 19, decided in issue 33).

The expert bundles whatever does not depend on code that must run on the client between
requests, and keeps requests apart only for a named reason: a client-side computation the
server cannot run (sklearn, scipy, a user ``nn.Module`` applied to a download), a
per-unit checkpoint and the one-hour limit of a request, a cell boundary. Requests made by
other modules (``tests.*``, unpublished helpers such as ``ndif_utils.filter_on_model``) are
not counted.

``requests`` is the expert's count for the data the file names (or, where that data is not
published, the stated assumption). When the expert's count itself depends on a loop whose
length the cost model cannot know statically, ``static`` is the expert's count at the cost
model's assumption (a loop of unknown length runs 8 times): that is what reach.py compares
the static count with. ``sends`` is what the file sends as written, run as intended: a
number where it can be worked out, else None, with the formula.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EXPERTS", "Expert", "as_intended", "check_against_readme", "expert_for"]


@dataclass(frozen=True)
class Expert:
    file: str  # the corpus file's name
    requests: int  # the expert's count, for the data the file names
    why: str  # one line: what is bundled, what must stay apart
    sends: int | None  # what the file sends as written, run as intended (None: data unknown)
    sends_how: str  # the formula behind ``sends``
    migrate: bool = False  # pre-0.5 nnsight API: measured with --migrate
    static: int | None = None  # the expert's count at the cost model's assumed loop lengths
    # text replacements that run the file as intended (the author's own switch): (old, new,
    # how many times ``old`` occurs)
    intended: tuple[tuple[str, str, int], ...] = ()
    # a file whose loop calls a callback parameter, builds its trace from a string, or opens
    # its block through a name (`with context:`, a trace or a nullcontext) counts as reached
    # when a finding names that construct: a regex for its reason or message
    names: str | None = None
    # the expert's count is one request per iteration of this loop (its header, as the
    # cost model names a loop of unknown length): compared with the optimized N
    per: str | None = None

    @property
    def compared(self) -> int:
        """The count the static optimized count is compared with."""
        return self.requests if self.static is None else self.static


EXPERTS: tuple[Expert, ...] = (
    Expert(
        "arena_fv_solutions.py", 9,
        "#%% exercise cells run one at a time: each cell's requests in one (calculate_h then "
        "intervene_with_h: h stays on the server; calculate_fn_vector then the generate); the "
        "layer-batch loop (7 traces of 64 head-ablation invokes) is one session",
        18, "cells 1+1+1+2+1+1+7+2+2 (REMOTE switched on; tests.* helpers not counted)",
        migrate=True, intended=(("\nREMOTE = False\n", "\nREMOTE = True\n", 1),),
    ),
    Expert(
        "arena_fv_solutions_old.py", 9,
        "the same cells as arena_fv_solutions.py (REMOTE = True as written): one request per "
        "cell, the 7-batch layer loop in one session",
        18, "cells 1+1+1+2+1+1+7+2+2 (tests.* helpers not counted)",
        migrate=True,
    ),
    Expert(
        "counterfactual_vsplice_gemma.py", 1,
        "one session: the 10-step loop runs on the server (argmax, torch.cat of the ids, the "
        "alt-V dict; decode/re-encode with the model's tokenizer there); prints replay after",
        17, "3 unmasked steps x 1 trace + 7 V-splice steps x 2 traces (main: 10 tokens, 3 unmasked)",
    ),
    Expert(
        "days_geometry_runner.py", 1,
        "one trace with an invoke per prompt (or one session), the retry wrapping it; PCA, "
        "spline and plot stay on the client after it",
        84, "7 days x 6 offsets x 2 templates, first run (no all_acts.npy cache yet)",
    ),
    Expert(
        "entity_tracking_behavioral_test.py", 1,
        "__main__ (--use_ndif_remote, metric accuracy) sends one generate per dataloader batch: "
        "all in one session; decoding and get_objects stay on the client",
        None, "B = ceil(num_samples / batch_size) generates (defaults in the unpublished "
        "patch_utils parser); run_behavioral_test (1 trace per label) is never called by __main__",
    ),
    Expert(
        "gptj_03_ablation_layers.py", 1,
        "one session (or one trace of invokes): the baseline and the 2 x 28 position ablations; "
        "P(Paris) computed on the server",
        57, "1 baseline + 2 positions x 28 layers",
    ),
    Expert(
        "gptj_04_causal_tracing.py", 1,
        "one session: clean, corrupted and the seq_len x 7 restorations (corrupt_subject seeds "
        "per trace on the server); the clean stack never leaves the server",
        72, "2 + seq_len x 7 layers; seq_len = 10 with GPT-J's BPE (the docstring says 8)",
    ),
    Expert(
        "gptj_demo_distance_by_type.py", 1,
        "one trace, an invoke per base prompt and neighbour (layer-15 last-token vectors); "
        "cosines on the server or the client, Jaccard and plot on the client",
        None, "F facts x (1 + neighbours): 5F with one neighbour per type (demo_facts.json unpublished)",
    ),
    Expert(
        "lla_interventions.py", 8,
        "one request per entry point (logit_lens, patchscope_lens, patchscope_generate, "
        "patchscope_intervention, patch_attention_lens, object_lens, latent_prompt_lens, "
        "Intervention.from_prompts): the source activations and the per-layer patches in one session",
        138, "1 + 33 + 2 + 2 + 33 + 33 + 33 + 1 with Llama-2-7b (32 layers), <= 32 prompts, remote=True",
        migrate=True, intended=(("remote=False", "remote=True", 9),),
    ),
    Expert(
        "lla_nnsight_utils.py", 1,
        "collect_activations_batched, its one entry point: the DataLoader batches as traces of "
        "one session (get_activations still runs inside each trace)",
        None, "ceil(N / batch_size) traces for N prompts",
        migrate=True, intended=(("remote=False", "remote=True", 2),),
        names=r"through the name `context`",
    ),
    Expert(
        "llm_latent_patchscope_colab.ipynb", 10,
        "notebook cells kept: each cell's requests in one session (the patchscope layer loops, "
        "the 80 one-layer generates of cell 17 with the user StoppingCriteria)",
        414, "cells 11, 12, 15-22: 1 + 2 + 1 + 3 + 81 + 81 + 81 + 81 + 1 + 82 on Llama-2-70b (80 layers)",
        migrate=True,
    ),
    Expert(
        "lmprobe_extraction.py", 2,
        "entry points ActivationExtractor.extract (its ceil(N/8) batch traces in one session) and "
        "_extract_batch_with_logits (1)",
        None, "ceil(N / 8) + 1 for N prompts",
    ),
    Expert(
        "lmprobe_extraction_later_dyncode.py", 2,
        "as lmprobe_extraction.py: the generated code would open one session around the batches; "
        "the trace is built from a string",
        None, "ceil(N / 8) + 1 for N prompts, each trace from generated code",
        names=r"exec_module|generated code|(from|as) a string|`_build_remote_extract_fn`",
    ),
    Expert(
        "manifold_steering_exp3_v2.py", 2,
        "phases 2 and 2b read the same 84 prompts in one batched request; ring geometry needs "
        "sklearn PCA and scipy CubicSpline on the client; then all 4 x C patched runs in one",
        None, "84 + 84 + 4 x C, C <= 84 base-correct prompts (first run, no caches)",
    ),
    Expert(
        "nnsight_web_csordas_llm_depth.ipynb", 6,
        "notebook cells kept (each already a session); plot_effects' per-prompt sessions, "
        "reached through the callback test_fn, become one per cell",
        8, "cells 9, 17, 18, 20, 24, 28: 1 + 2 + 2 + 1 + 1 + 1 sessions (N_EXAMPLES = 2)",
        names=r"`test_fn`",
    ),
    Expert(
        "nnsight_web_huang_memorization.ipynb", 5,
        "cells kept, but cell 22's random-activation trace only feeds cell 23's session: it "
        "moves into that session; the 4 demonstration traces stay in their cells",
        6, "cells 19, 20, 22, 23 (one session), 25, 26",
        migrate=True,
    ),
    Expert(
        "poetry_lens_gptj_ndif.py", 1,
        "one session: the 12 prompts as invokes reading 7 layers, the lens on the server, and the "
        "7 greedy loops (decode/stop test with the model's tokenizer there)",
        None, "12 + 84 + 7 x steps (4..30, stops at . ! ?): 124..306",
        migrate=True,
    ),
    Expert(
        "r1_70b_mmlu_chunked_generate_v03.py", 15,
        "one session per worker(lag, rep): its ceil(N/70) generates of 70 x 600 tokens on 70B; the "
        "per-(lag, rep) pickle checkpoint and the one-hour limit keep the 15 apart",
        45, "1 subject x 3 lags x 5 reps x ceil(N/70) chunks; N = 173 (MMLU college_medicine test)",
        migrate=True,
    ),
    Expert(
        "r1_olymmath_generate.py", 100,
        "one request per problem (its n sampled responses as invokes of one generate); progress "
        "is saved per problem and R1's long generations keep problems apart for the hour limit",
        None, "P problems x n responses (config.yaml unpublished); P = 100 (one OlymMATH split)",
        migrate=True, static=8, per="for idx, row in df.iterrows()",
    ),
    Expert(
        "rescue_reversibility_test.py", 1,
        "one session: for each subspace and sample the clean run reads the layer output and the "
        "prediction, ablations as invokes; projections and random draws prepared on the client",
        None, "S subspaces x 80 samples x 7 traces = 560 S (plus ndif_utils.filter_on_model's, unseen)",
    ),
    Expert(
        "truthfulqa_category_generate.py", 1,
        "one session with the 40 five-token generates (or invokes); decoding, regex and CSV stay "
        "on the client after it",
        40, "main: sample_size = 40, max_examples = 40",
    ),
    Expert(
        "truthfulqa_mc_activations.py", 1,
        "one session: every example's trace (activations at 9 layers + P(A)/P(B)); option order "
        "drawn with `random` on the client first; per-example torch.save after",
        791, "1 probe trace + Q examples x 1 layer batch (default); Q = 790 rows of the 2025 TruthfulQA.csv",
    ),
    Expert(
        "tuned_lens_gradio_app.py", 2,
        "residuals and logit lens for both prompts in one trace; the user TunedLens "
        "(32 d x d weights) runs on the client; then one request unembeds them all",
        6, "2 default prompts x 3 traces, sent at launch",
    ),
)


def expert_for(name: str) -> Expert | None:
    for expert in EXPERTS:
        if expert.file == name or Path(expert.file).stem == Path(name).stem:
            return expert
    return None


def as_intended(expert: Expert | None, text: str) -> str:
    """The file's text with the author's own switch turned as intended (each replacement
    must find ``old`` as many times as stated: a changed file is noticed, not half-switched)."""
    if expert is None:
        return text
    for old, new, times in expert.intended:
        if text.count(old) != times:
            raise ValueError(f"{expert.file}: {old!r} occurs {text.count(old)} times, not {times}")
        text = text.replace(old, new)
    return text


def check_against_readme(a1_stems: set[str]) -> list[str]:
    """Problems: A1 files of the README without an expert count, and counts for files the
    README does not mark A1."""
    known = {Path(expert.file).stem for expert in EXPERTS}
    problems = [f"no expert count for A1 file {stem}" for stem in sorted(a1_stems - known)]
    problems += [f"expert count for {stem}, which the README does not mark A1" for stem in sorted(known - a1_stems)]
    for expert in EXPERTS:
        if expert.names is not None:
            re.compile(expert.names)
    return problems
