"""Short answers to a few questions; a question whose request fails is logged and skipped."""
from tqdm import tqdm
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
tok = model.tokenizer

questions = [
    {"id": "q1", "prompt": "Q: What is the capital of France?\nA:", "answer": "Paris"},
    {"id": "q2", "prompt": "Q: How many legs does a spider have?\nA:", "answer": "eight"},
    {"id": "q3", "prompt": "Q: What colour is the sky?\nA:", "answer": "blue"},
]

answers = {}
failed = []
try:
    with model.session(remote=True):
        _ndif_rows = list().save()  # one record per iteration, replayed after the session
        for q in questions:
            with model.generate(q["prompt"], max_new_tokens=4, do_sample=False):
                out = model.generator.output
            _ndif_rows.append((out, q))
except Exception:  # the session failed: run the code as written, each failure handled on its own
    for q in tqdm(questions, desc="questions"):
        try:
            with model.generate(q["prompt"], max_new_tokens=4, do_sample=False, remote=True):
                out = model.generator.output.save()
            answer = tok.decode(out[0, -4:]).strip()
            print(f"{q['id']}: {answer!r} (expected {q['answer']!r})")
            answers[q["id"]] = answer
        except Exception as err:
            print(f"{q['id']} failed: {err}")
            failed.append(q["id"])
else:
    for out, q in tqdm(_ndif_rows, desc="questions"):
        try:
            answer = tok.decode(out[0, -4:]).strip()
            print(f"{q['id']}: {answer!r} (expected {q['answer']!r})")
            answers[q["id"]] = answer
        except Exception as err:
            print(f"{q['id']} failed: {err}")
            failed.append(q["id"])

print(f"{len(answers)} answered, {len(failed)} failed")
