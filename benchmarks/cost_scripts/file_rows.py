"""A loop over the rows of a CSV file: how many there are is known only when it runs.

``io.StringIO`` stands in for ``open("questions.csv")`` (the benchmark runs no files of
its own); the cost model sees a list it cannot count, and shows its requests as ``N``.
``benchmarks/cost_accuracy.py`` tells it the file's length (``TRIPS``) to compare.
"""
import csv
import io

from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
QUESTIONS = io.StringIO(
    "question,answer\n"
    "The capital of France is,Paris\n"
    "Water boils at a temperature of,100\n"
    "The opposite of hot is,cold\n"
    "A week has this many days:,7\n"
    "The largest planet is,Jupiter\n"
)

rows = list(csv.DictReader(QUESTIONS))
answers = []
for row in rows:
    with model.trace(row["question"], remote=True):
        probs = model.lm_head.output[0, -1].softmax(-1).save()
    answers.append(int(probs.argmax()))

print(len(answers), answers[:2])
