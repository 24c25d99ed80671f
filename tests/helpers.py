"""The tests' shared helpers under their old module name: they live in tests/factories.py."""

from tests.factories import (
    PG_ADMIN_URL,
    ROOT,
    TINY_SUITE,
    byte_bpe_tokenizer,
    scipy_percentile_ci,
    tiny_gpt,
    tiny_llama,
    write_suite,
)

__all__ = [
    "PG_ADMIN_URL",
    "ROOT",
    "TINY_SUITE",
    "byte_bpe_tokenizer",
    "scipy_percentile_ci",
    "tiny_gpt",
    "tiny_llama",
    "write_suite",
]
