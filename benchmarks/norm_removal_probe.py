"""What removing SmolLM2's norms does before any fine-tuning (`remove_norms`, no training).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/norm_removal_probe.py [--blocks 4]

On 4 windows of 64 Shakespeare tokens in SmolLM2's tokenizer: the loss with every norm, then
with the second norm of blocks 0, 1, ... removed one more at a time (`--blocks` of them), then
with every norm removed; with each, the largest |hidden state| at position 0 and elsewhere. The
frozen scales are measured on the same windows (positions 1 onwards, as the authors').
"""

from __future__ import annotations

import argparse

import torch

from harness.methods.norm_removal import llama_norms
from harness.models.pretrained import PretrainedSpec, load_pretrained
from harness.tasks.corpora import ModelTokenizer
from harness.tasks.lmeval import corpus_split_tokens


def main(blocks: int) -> None:
    torch.set_num_threads(1)
    loaded = load_pretrained(PretrainedSpec(source="smollm2-135m"))
    model, tokenizer = loaded.model.eval(), ModelTokenizer(loaded.tokenizer)
    ids = corpus_split_tokens("shakespeare", "train", tokenizer)[: 4 * 64].view(4, 64)

    def report(what: str) -> None:
        with torch.no_grad():
            out = model(input_ids=ids, labels=ids, output_hidden_states=True)
        hidden = torch.stack(out.hidden_states[1:]).abs()
        first, rest = hidden[:, :, 0].max().item(), hidden[:, :, 1:].max().item()
        print(
            f"{what}: loss {out.loss.item():.3f}, max |h| position 0 {first:.0f}, others {rest:.0f}"
        )

    report("every norm")
    first, second, final = llama_norms(model)
    report("wrapped (scales measured)")
    print("frozen scales of the second norms:", [round(float(n.scale), 2) for n in second[:blocks]])
    for index in range(blocks):
        second[index].removed = True
        report(f"second norms of blocks 0-{index} removed")
    for norm in [*second, *first, final]:
        norm.removed = True
    for norm in first:
        norm.value_removed = True
    report("every norm removed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=4)
    main(parser.parse_args().blocks)
