"""What does GPT-2 predict after a prompt? Full logits are saved, then reduced here."""
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPT = "The Eiffel Tower is in the city of"
paris = model.tokenizer(" Paris")["input_ids"][0]
rome = model.tokenizer(" Rome")["input_ids"][0]


def entropy(logits):
    """Entropy of the next-token distribution, in nats."""
    probs = torch.softmax(logits, dim=-1)
    return -(probs * torch.log(probs)).sum()


with model.trace(PROMPT, remote=True):
    hidden = model.transformer.h[-1].output.save()
    logits = model.lm_head.output.save()

# reductions on the client
prediction = logits[0, -1].argmax().item()
top5 = logits[0, -1].topk(5).indices.tolist()
p_paris = torch.softmax(logits[0, -1], dim=-1)[paris].item()
logit_diff = (logits[0, -1, paris] - logits[0, -1, rome]).item()
uncertainty = entropy(logits[0, -1]).item()
final_norm = hidden[0, -1].norm().item()

print(prediction, top5, round(p_paris, 4), round(logit_diff, 4), round(uncertainty, 4), round(final_norm, 4))
