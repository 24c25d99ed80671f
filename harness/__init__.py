"""LayerBench: a declarative benchmark and leaderboard harness for layerwise methods."""

import logging

# At import, torchao logs that its CUDA-only extensions do not load on this CPU build and torch
# warns that torchao registers enums with pytree; neither affects anything LayerBench runs.
for _noisy in ("torchao", "torch.utils._pytree"):
    logging.getLogger(_noisy).setLevel(logging.ERROR)
