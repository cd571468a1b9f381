"""Steer GPT-2 with the difference of two residuals and report the top token at a few
strengths; the residuals are read through a retry wrapper."""
import time

from nnsight import LanguageModel

LAYER = 6


def with_retries(fn, *args, tries=3, wait=2.0):
    for attempt in range(1, tries + 1):
        try:
            return fn(*args)
        except Exception as exc:
            print(f"attempt {attempt}/{tries} failed: {exc!r}")
            if attempt == tries:
                raise
            time.sleep(wait * attempt)


def resid(model, text):
    with model.trace(text, remote=True):
        h = model.transformer.h[LAYER].output.save()
    return h


def main():
    model = LanguageModel("openai-community/gpt2")
    love = with_retries(resid, model, "Love")
    hate = with_retries(resid, model, "Hate")
    vec = love[0, -1] - hate[0, -1]
    runs = []
    for alpha in [0.0, 2.0, 8.0]:
        with model.trace("I think that you are", remote=True):
            model.transformer.h[LAYER].output[0, -1] += alpha * vec
            runs.append(model.lm_head.output.save())
    tops = [logits[0, -1].argmax().item() for logits in runs]
    for alpha, top in zip([0.0, 2.0, 8.0], tops):
        print(f"alpha={alpha:4.1f}: {model.tokenizer.decode(top)!r}")


if __name__ == "__main__":
    main()
