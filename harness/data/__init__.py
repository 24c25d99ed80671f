"""Prepared datasets: corpora tokenized once into memory-mapped token shards with a JSON index
(`layerbench data prepare`), read by the `lm` task's `dataset:` (SPEC section 4).

`sources` reads documents (text, JSONL, Parquet, Arrow, `save_to_disk`, `hf:`), `tokenizers`
builds tokenizers (byte, char, BPE, a model's, a Hugging Face folder's), `prepare` tokenizes and
writes, `store` lays the files out and reads them back.
"""
