"""Activation patching on GPT-2, in three runs: clean, corrupted, and the clean residual
of one layer patched into the corrupted run, layer by layer."""
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
tok = model.tokenizer
clean = "When Mary and John went to the store, John gave a drink to"
corrupt = "When Mary and John went to the store, Mary gave a drink to"
mary, john = tok.encode(" Mary")[0], tok.encode(" John")[0]

# ── RUN 1: clean — keep every layer's last-position residual ──
with model.session(remote=True):
    _ndif_log = dict().save()  # the values the replay after the session reads, by name
    with model.trace(clean):
        clean_resid = torch.stack([model.transformer.h[i].output[0, -1] for i in range(4)])
        clean_logits = model.lm_head.output[0, -1]
    clean_diff = (clean_logits[mary] - clean_logits[john]).item().save()
    _ndif_log["clean_resid_shape"] = clean_resid.shape

    # ── RUN 2: corrupted — the names swapped ──
    with model.trace(corrupt):
        corrupt_logits = model.lm_head.output[0, -1]
    corrupt_diff = (corrupt_logits[mary] - corrupt_logits[john]).item().save()

    # ── RUN 3: patched — the clean residual of one layer in the corrupted run ──
    # recovery = (patched - corrupted) / (clean - corrupted): 0 = nothing, 1 = all of it
    recovery = dict().save()
    _ndif_rows = list().save()  # one record per iteration, replayed after the session
    for layer in range(4):
        with model.trace(corrupt):
            model.transformer.h[layer].output[0, -1] = clean_resid[layer]
            patched_logits = model.lm_head.output[0, -1]
        patched_diff = (patched_logits[mary] - patched_logits[john]).item()
        recovery[layer] = (patched_diff - corrupt_diff) / (clean_diff - corrupt_diff)
        _ndif_rows.append({"layer": layer, "recovery_layer": recovery[layer]})
print(f"clean logit diff: {clean_diff:+.3f} (residuals {tuple(_ndif_log['clean_resid_shape'])})")
print(f"corrupted logit diff: {corrupt_diff:+.3f}")

print("layer  recovery")
for _ndif_row in _ndif_rows:
    layer = _ndif_row["layer"]
    print(f"{layer:5d}  {_ndif_row['recovery_layer']:+.3f}")

best = max(recovery, key=recovery.get)
print(f"most recovery at layer {best}")
