"""The built-in `gpt` as a `transformers.PreTrainedModel` (SPEC 3): `GPTForCausalLM`.

It holds a `harness.models.gpt.GPT` as `model` and adds what transformers' tooling expects:
`save_pretrained` / `from_pretrained`, `generate`, tuple outputs and lm-eval's `hf` backend.
Importing this module registers `GPTConfig` and `GPTForCausalLM` with the Auto classes, so
`AutoModelForCausalLM.from_pretrained(folder)` loads a saved one. Trials train the plain `GPT`
(this module takes seconds to import) and wrap it here only when such tooling needs it
(`as_pretrained`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from harness.models.gpt import GPT, GPTConfig


class GPTForCausalLM(PreTrainedModel, GenerationMixin):
    """`GPT` for transformers: the same modules (under `model.`), the same forward."""

    config_class = GPTConfig
    base_model_prefix = "model"
    _no_split_modules: ClassVar[list[str]] = ["Block"]
    _tied_weights_keys: ClassVar[dict[str, str]] = {
        "model.lm_head.weight": "model.embed_tokens.weight"
    }

    def __init__(self, config: GPTConfig, model: GPT | None = None) -> None:
        """A new `GPT` of `config`, or `model` itself (its weights are shared, not copied)."""
        super().__init__(config)
        self.model = model if model is not None else GPT(config)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """Nothing: `GPT` initialises its weights when it is built (`GPT.init_weights`)."""

    def get_input_embeddings(self) -> nn.Module:
        return self.model.get_input_embeddings()

    def get_output_embeddings(self) -> nn.Module:
        return self.model.get_output_embeddings()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple[Tensor, ...]:
        """`GPT.forward` (`labels` and `output_hidden_states` among `kwargs`) as transformers'
        output, or its tuple (`return_dict=False`)."""
        out = self.model(input_ids, attention_mask, **kwargs)
        output = CausalLMOutputWithPast(
            loss=out.loss, logits=out.logits, hidden_states=out.hidden_states
        )
        use_dict = self.config.return_dict if return_dict is None else return_dict
        return output if use_dict else output.to_tuple()

    def prepare_inputs_for_generation(
        self, input_ids: Tensor, next_sequence_length: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Feed the whole sequence at every step (even with `use_cache`): there is no KV cache."""
        return super().prepare_inputs_for_generation(input_ids, **kwargs)


def as_pretrained(model: nn.Module) -> nn.Module:
    """`model` as transformers' tooling takes it: a `GPT` wrapped in `GPTForCausalLM` (sharing
    its weights and training mode), any other model as it is."""
    if not isinstance(model, GPT):
        return model
    wrapped = GPTForCausalLM(model.config, model)
    return wrapped.train(model.training)


AutoConfig.register(GPTConfig.model_type, GPTConfig, exist_ok=True)
AutoModelForCausalLM.register(GPTConfig, GPTForCausalLM, exist_ok=True)
