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
p_answer = []
for layer in range(model.config.n_layer):
    with model.trace(prompt, remote=True):
        hidden = model.transformer.h[layer].output
        logits = model.lm_head(model.transformer.ln_f(hidden)).save()
    probs = logits[0, -1].softmax(-1)
    p_answer.append(probs[answer].item())
    print(f"layer {layer:2d}: top {tok.decode(probs.argmax())!r:>10}  P(Paris)={probs[answer].item():.3f}")

# %%
plt.plot(p_answer, marker="o")
plt.xlabel("layer")
plt.ylabel("P(Paris)")
plt.savefig("lens.png")
