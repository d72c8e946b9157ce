"""`gspo-trl merge` turns a LoRA run into a full model; `eval` takes the adapter folder directly."""

from __future__ import annotations

import json

import pytest

from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)


def _reversal_rows(path, n: int = 3) -> list[dict]:
    from gspo_trl.data.synthetic import make_rl_rows

    rows = make_rl_rows(n, seed=0)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


@pytest.fixture
def lora_run(tmp_path):
    """A LoRA run's output_dir as a real trainer leaves it: adapter + tokenizer, no config.json.
    The adapter's B matrices are random (init_lora_weights=False), so merging changes outputs."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests._gspo_helpers import tiny_model_dir

    base = tiny_model_dir(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(base)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    run_dir = tmp_path / "lora-run"
    peft_model.save_pretrained(run_dir)
    AutoTokenizer.from_pretrained(base).save_pretrained(run_dir)
    return {"base": base, "run": run_dir, "peft_model": peft_model}


def test_merge_turns_a_lora_run_into_a_model_that_computes_the_same(lora_run, tmp_path, capsys) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from gspo_trl.cli.main import main as gspo_trl_main

    out = tmp_path / "merged"
    assert gspo_trl_main(["merge", str(lora_run["run"]), str(out)]) == 0, capsys.readouterr().err
    merged = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(lora_run["base"])
    ids = torch.tensor([[1, 5, 9, 20, 33]])
    with torch.no_grad():
        expected = lora_run["peft_model"](ids).logits
        assert torch.allclose(merged(ids).logits, expected, atol=1e-5)
        assert not torch.allclose(base(ids).logits, expected, atol=1e-3)  # the adapter mattered
    assert (out / "tokenizer.json").is_file()
    printed = capsys.readouterr().out.splitlines()
    # It said "merged RUN into BASE: merged", which read as if the base had been overwritten.
    assert printed[0].startswith(f"wrote the merged model to {out} ("), printed
    assert printed[0].endswith(" MB)"), printed
    assert f"on base {lora_run['base']}; the base model is unchanged" in printed[1], printed
    assert gspo_trl_main(["merge", str(tmp_path / "nothing-here"), str(tmp_path / "x")]) == 2
    assert "no PEFT adapter" in capsys.readouterr().err


def test_eval_loads_an_adapter_directory_directly(lora_run, tmp_path, capsys, caplog) -> None:
    """And says that it wrote a whole merged model into the run folder, where, and its size."""
    import logging

    from gspo_trl.cli.main import main as gspo_trl_main

    _reversal_rows(tmp_path / "data.jsonl", n=2)
    common = ["--data", str(tmp_path / "data.jsonl"), "--reward", "gspo_trl.data.synthetic:exact_match"]
    common += ["--max-new-tokens", "4", "--engine", "hf"]
    merged = lora_run["run"] / "merged"
    for done in ("merged it into its base model and wrote the whole model to", "merged from it earlier"):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="gspo_trl.model.loading.adapters"):
            assert gspo_trl_main(["eval", str(lora_run["run"]), *common]) == 0, capsys.readouterr().err
        said = [r.getMessage() for r in caplog.records if r.name == "gspo_trl.model.loading.adapters"]
        assert len(said) == 1 and done in said[0] and f"{merged} (" in said[0] and " MB;" in said[0], said
        out = capsys.readouterr().out
        # stdout is the report alone (for `> out`); where the merged model went is the log line
        # above, which the CLI's handler sends to stderr (in-process it bypasses capsys)
        assert str(merged) not in out and "INFO" not in out, out
        assert out.splitlines()[0].endswith("data.jsonl, graded by exact_match"), out
        assert out.splitlines()[-1] == f"results: {lora_run['run'] / 'eval_results.json'}", out
    assert (merged / "config.json").is_file()
    assert (lora_run["run"] / "eval_results.json").is_file()
