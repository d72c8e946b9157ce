"""gspo_trl.model.tiny.dense: a model vocabulary larger than the tokenizer's, as hub checkpoints have."""

from __future__ import annotations

import pytest

from gspo_trl.model.tiny.dense import TinyModelSpec, build_tiny_model, default_corpus, train_tokenizer


def test_model_vocab_runs_past_the_tokenizer_and_those_ids_decode_to_nothing():
    tokenizer = train_tokenizer(default_corpus())
    model = build_tiny_model(tokenizer, TinyModelSpec(num_hidden_layers=1, model_vocab_size=1000))
    assert model.get_input_embeddings().num_embeddings == model.lm_head.out_features == 1000
    digit = tokenizer.convert_tokens_to_ids("7")
    assert tokenizer.decode([digit, 999, len(tokenizer)]) == "7"
    with pytest.raises(ValueError, match="model_vocab_size 10 < the tokenizer's"):
        build_tiny_model(tokenizer, TinyModelSpec(model_vocab_size=10))
