"""Zero-shot sentiment on a few reviews: does GPT-2 prefer " positive" or " negative"
after "Sentiment:"? Each review's verdict is printed and appended to a JSONL file."""
import json

from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
tok = model.tokenizer
POSITIVE = tok.encode(" positive")[0]
NEGATIVE = tok.encode(" negative")[0]

reviews = [
    {"id": 101, "text": "A warm, funny film with a great cast.", "label": "positive", "source": "imdb"},
    {"id": 102, "text": "Two hours I will never get back.", "label": "negative", "source": "imdb"},
    {"id": 103, "text": "The soup was cold and the staff rude.", "label": "negative", "source": "yelp"},
    {"id": 104, "text": "Best tacos in town, and cheap too.", "label": "positive", "source": "yelp"},
]

correct = 0
with model.session(remote=True):
    _ndif_log = dict().save()  # the values the replay after the session reads, by name
    _ndif_rows = list().save()  # one record per iteration, replayed after the session
    for n, review in enumerate(reviews):
        prompt = f"Review: {review['text']}\nSentiment:"
        with model.trace(prompt):
            logits = model.lm_head.output[0, -1]
        margin = (logits[POSITIVE] - logits[NEGATIVE]).item()
        guess = "positive" if margin > 0 else "negative"
        if guess == review["label"]:
            correct += 1
        _ndif_rows.append({
            "n": n,
            "review_id": review['id'],
            "review_source": review['source'],
            "review_text_head": review['text'][:24],
            "review_label": review['label'],
            "guess": guess,
            "margin": margin,
        })
    _ndif_log["correct"] = correct
for _ndif_row in _ndif_rows:
    n = _ndif_row["n"]
    guess = _ndif_row["guess"]
    margin = _ndif_row["margin"]
    print(f"[{n + 1}/{len(reviews)}] #{_ndif_row['review_id']} ({_ndif_row['review_source']}) {_ndif_row['review_text_head']}...")
    print(f"    label={_ndif_row['review_label']} guess={guess} margin={margin:+.2f}")
    with open("sentiment.jsonl", "a") as f:
        record = {"id": _ndif_row["review_id"], "label": _ndif_row["review_label"], "guess": guess, "margin": round(margin, 3)}
        f.write(json.dumps(record) + "\n")
correct = _ndif_log["correct"]

print(f"accuracy: {correct}/{len(reviews)}")
