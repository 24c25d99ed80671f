"""The built-in `gpt` as a `transformers.PreTrainedModel` (SPEC 3): `GPTForCausalLM`.

It holds a `harness.models.gpt.GPT` as `model` and adds what transformers' tooling expects:
`save_pretrained` / `from_pretrained`, `generate`, tuple outputs and lm-eval's `hf` backend,
and its configuration `GPTPretrainedConfig`, a `PreTrainedConfig` that is also a `GPTConfig`.
Importing this module registers both with the Auto classes, so
`AutoModelForCausalLM.from_pretrained(folder)` loads a saved one. Trials train the plain `GPT`
(this module takes seconds to import) and wrap it here only when such tooling needs it
(`as_pretrained`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, ClassVar

from torch import Tensor, nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    GenerationMixin,
    PreTrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_outputs import CausalLMOutputWithPast

from harness.models.gpt import GPT, MODEL_TYPE, TRANSFORMERS_NAMES, GPTConfig


class GPTPretrainedConfig(PreTrainedConfig, GPTConfig):
    """`GPTConfig` as transformers' configuration: the same fields (saved in config.json, read
    back by `AutoConfig`), under transformers' names too (`attribute_map`)."""

    model_type = MODEL_TYPE
    attribute_map: ClassVar[dict[str, str]] = TRANSFORMERS_NAMES
    use_cache: bool = False  # there is no KV cache

    def __post_init__(self, **kwargs: Any) -> None:
        GPTConfig.__post_init__(self)
        super().__post_init__(**kwargs)


class GPTForCausalLM(PreTrainedModel, GenerationMixin):
    """`GPT` for transformers: the same modules (under `model.`), the same forward."""

    config_class = GPTPretrainedConfig
    base_model_prefix = "model"
    _no_split_modules: ClassVar[list[str]] = ["Block"]
    _tied_weights_keys: ClassVar[dict[str, str]] = {
        "model.lm_head.weight": "model.embed_tokens.weight"
    }

    def __init__(self, config: GPTPretrainedConfig, model: GPT | None = None) -> None:
        """A new `GPT` of `config`, or `model` itself (its weights are shared, not copied; it
        takes `config`, which holds the same values, so the two faces share one config)."""
        super().__init__(config)
        self.model = model if model is not None else GPT(config)
        self.model.config = config
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
    config = model.config
    if not isinstance(config, GPTPretrainedConfig):
        config = GPTPretrainedConfig(**asdict(config))
    wrapped = GPTForCausalLM(config, model)
    return wrapped.train(model.training)


AutoConfig.register(MODEL_TYPE, GPTPretrainedConfig, exist_ok=True)
AutoModelForCausalLM.register(GPTPretrainedConfig, GPTForCausalLM, exist_ok=True)
