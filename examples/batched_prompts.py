"""Sentiment read-out for a batch of reviews: for each review, the logit difference
between " good" and " bad" after the prompt, one remote request per review."""
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")

REVIEWS = [
    "The movie was wonderful and the acting was",
    "I hated every minute of this film, it was",
    "The food at this place is",
    "Customer service was slow and the staff were",
    "This book kept me up all night, it is",
    "The hotel room was dirty and the bed was",
    "Our trip to the coast was",
    "The new phone update made everything",
]
good = model.tokenizer(" good")["input_ids"][0]
bad = model.tokenizer(" bad")["input_ids"][0]

scores = {}
for review in REVIEWS:
    with model.trace(review, remote=True):
        logits = model.lm_head.output.save()
    # positive means the model leans towards " good"
    scores[review] = (logits[0, -1, good] - logits[0, -1, bad]).item()

for text, score in sorted(scores.items(), key=lambda item: item[1]):
    print(f"{score:+.3f}  {text}")
