# %% [markdown]
# # Logit lens: when does GPT-2 settle on its answer?

# %%
import matplotlib.pyplot as plt
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
tok = model.tokenizer
prompt = "The Eiffel Tower is in the city of"
answer = tok.encode(" Paris")[0]

# %%
# ── one trace per layer: the answer's probability through the final norm ──
with model.session(remote=True):
    p_answer = list().save()
    _ndif_rows = list().save()  # one record per iteration, replayed after the session
    with model.trace(prompt):
        for layer in range(model.config.n_layer):
            hidden = model.transformer.h[layer].output
            logits = model.lm_head(model.transformer.ln_f(hidden)).save()
            probs = logits[0, -1].softmax(-1)
            p_answer.append(probs[answer].item())
            _ndif_rows.append({
                "layer": layer,
                "probs_argmax": probs.argmax(),
                "probs_answer": probs[answer].item(),
            })
for _ndif_row in _ndif_rows:
    layer = _ndif_row["layer"]
    print(f"layer {layer:2d}: top {tok.decode(_ndif_row['probs_argmax'])!r:>10}  P(Paris)={_ndif_row['probs_answer']:.3f}")

# %%
plt.plot(p_answer, marker="o")
plt.xlabel("layer")
plt.ylabel("P(Paris)")
plt.savefig("lens.png")
