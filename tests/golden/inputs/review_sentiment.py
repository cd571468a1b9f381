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
for n, review in enumerate(reviews):
    prompt = f"Review: {review['text']}\nSentiment:"
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output[0, -1].save()
    margin = (logits[POSITIVE] - logits[NEGATIVE]).item()
    guess = "positive" if margin > 0 else "negative"
    if guess == review["label"]:
        correct += 1
    print(f"[{n + 1}/{len(reviews)}] #{review['id']} ({review['source']}) {review['text'][:24]}...")
    print(f"    label={review['label']} guess={guess} margin={margin:+.2f}")
    with open("sentiment.jsonl", "a") as f:
        record = {"id": review["id"], "label": review["label"], "guess": guess, "margin": round(margin, 3)}
        f.write(json.dumps(record) + "\n")

print(f"accuracy: {correct}/{len(reviews)}")
