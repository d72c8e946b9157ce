"""The demo's warm start is reused only when every input that made it is the same."""

from __future__ import annotations

from dataclasses import asdict, fields, replace

from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)


def test_warm_start_is_cached_by_its_inputs(tmp_path) -> None:
    """`make demo` twice: the second run reuses the warm start; other settings train anew."""
    from gspo_trl.data.synthetic import ReversalTask
    from gspo_trl.demo.warm_start import CACHE_KEY_FILE, WarmStartSettings, warm_start, warm_start_key
    from gspo_trl.model.tiny.dense import save_tiny_model

    task = ReversalTask()
    base = save_tiny_model(tmp_path / "base")
    rebuilt = save_tiny_model(tmp_path / "rebuilt")  # the demo rebuilds the tiny model every run
    settings = WarmStartSettings(steps=2, batch_size=4)
    key = warm_start_key(base, task, asdict(settings))
    assert key == warm_start_key(rebuilt, task, asdict(settings))
    for field in fields(WarmStartSettings):  # every setting is in the key
        value = getattr(settings, field.name)
        other = value + "x" if isinstance(value, str) else 1 if value is None else value + 1
        assert key != warm_start_key(base, task, asdict(replace(settings, **{field.name: other}))), field.name
    assert key != warm_start_key(base, ReversalTask(max_digits=8), asdict(settings))

    out = tmp_path / "warm"
    warm_start(base, out, task, settings)
    weights = out / "model.safetensors"
    first = weights.stat().st_mtime_ns
    warm_start(rebuilt, out, task, settings)
    assert weights.stat().st_mtime_ns == first  # reused, not retrained
    warm_start(base, out, task, replace(settings, steps=3))
    assert weights.stat().st_mtime_ns != first
    assert '"steps": 3' in (out / CACHE_KEY_FILE).read_text()


def test_tokenized_rows_are_the_ones_sft_trainer_makes(tmp_path) -> None:
    """The warm start hands SFTTrainer rows it tokenized in a batch; TRL's own per-row
    tokenization of the same conversations gives the same input_ids and loss mask."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from gspo_trl.data.synthetic import ReversalTask
    from gspo_trl.demo.warm_start import tokenize_conversations, warm_start_conversations
    from gspo_trl.model.tiny.dense import save_tiny_model

    base = save_tiny_model(tmp_path / "base")
    tokenizer = AutoTokenizer.from_pretrained(base)
    conversations = warm_start_conversations(64, 1, ReversalTask())
    config = SFTConfig(output_dir=str(tmp_path / "sft"), use_cpu=True, report_to="none", bf16=False)
    by_trl = SFTTrainer(
        model=str(base),
        processing_class=tokenizer,
        train_dataset=Dataset.from_list(conversations),
        args=config,
    ).train_dataset
    ours = tokenize_conversations(conversations, tokenizer)
    assert by_trl["input_ids"] == ours["input_ids"]
    assert by_trl["labels"] == ours["labels"]
    assert all(-100 in labels and labels[-1] != -100 for labels in ours["labels"])  # prompt, completion
