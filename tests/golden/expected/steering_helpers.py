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


def resid(model, text, remote=True):
    with model.trace(text, remote=remote):
        h = model.transformer.h[LAYER].output.save()
    return h


def main():
    model = LanguageModel("openai-community/gpt2")
    for _ndif_attempt in range(1, 3 + 1):  # the requests' retry, now around the whole session
        try:
            with model.session(remote=True):
                love = resid(model, "Love", remote=False)
                hate = resid(model, "Hate", remote=False)
                vec = love[0, -1] - hate[0, -1]
                runs = list().save()
                # layers before the patched one are the same in every iteration: compute them once
                _ndif_cache = list()
                with model.trace("I think that you are") as _ndif_tracer:
                    for _ndif_i in range(LAYER):
                        _ndif_cache.append(model.transformer.h[_ndif_i].output)
                    _ndif_tracer.stop()
                for alpha in [0.0, 2.0, 8.0]:
                    with model.trace("I think that you are"):
                        for _ndif_i in range(LAYER):
                            model.transformer.h[_ndif_i].skip(_ndif_cache[_ndif_i])
                        model.transformer.h[LAYER].output[0, -1] += alpha * vec
                        runs.append(model.lm_head.output)
                love = hate = None  # nothing after the session reads them: let go here, not downloaded
            break
        except Exception as exc:
            print(f"attempt {_ndif_attempt}/3 failed: {exc!r}")
            if _ndif_attempt == 3:
                raise
            time.sleep(2.0 * _ndif_attempt)
    tops = [logits[0, -1].argmax().item() for logits in runs]
    for alpha, top in zip([0.0, 2.0, 8.0], tops):
        print(f"alpha={alpha:4.1f}: {model.tokenizer.decode(top)!r}")


if __name__ == "__main__":
    main()
