"""Held-out evaluation through the run's colocated vLLM engine vs HF generate, on one trainer.

python tests/_heldout_vllm_run.py OUT.json MODEL_DIR

MODEL_DIR's tokenizer carries Qwen3's template and the run sets enable_thinking false, so the
prompt ids the engine receives can be compared with GRPOTrainer._tokenize_prompts'.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.shipped import RECIPES_DIR
from gspo_trl.eval.generation import generate_completions
from gspo_trl.model.prompts import PromptRendering
from gspo_trl.training.build import build_trainer
from gspo_trl.training.heldout.generation import heldout_generator
from gspo_trl.training.heldout.scoring import HeldoutCallback


def main() -> None:
    out, model_dir = Path(sys.argv[1]), sys.argv[2]
    overrides = {
        "model.name_or_path": model_dir,
        "data.num_rows": 32,
        "data.eval_size": 8,
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_max_model_length": 256,
        "output_dir": str(out.parent / "run"),
        "report_to": "none",
        "chat_template_kwargs": {"enable_thinking": False},
    }
    trainer = build_trainer(load_recipe(RECIPES_DIR / "tiny" / "reversal.yaml", overrides))
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, HeldoutCallback))
    callback.settings = dataclasses.replace(callback.settings, ks=())
    prompts = callback.dataset["prompt"]
    llm = trainer.vllm_generation.llm
    sent: list[list[int]] = []
    llm_generate = llm.generate

    def recording_generate(inputs, *args, **kwargs):  # the engine's real generate, inputs recorded
        sent.extend(list(item["prompt_token_ids"]) for item in inputs)
        return llm_generate(inputs, *args, **kwargs)

    llm.generate = recording_generate
    with heldout_generator(trainer, callback._sampling()) as generator:
        engine = generator.engine
        engine_texts = generator.generate(prompts, 1, 0.0)
    llm.generate = llm_generate
    model = trainer.accelerator.unwrap_model(trainer.model)
    rendering = PromptRendering.of_trainer(trainer)
    hf_texts = generate_completions(
        model, trainer.processing_class, prompts, callback.settings.max_new_tokens, rendering=rendering
    )
    logs = callback.evaluate()
    training_ids = [list(ids) for ids in trainer._tokenize_prompts(list(prompts))[0]]
    record = {"engine": engine, "vllm": engine_texts, "hf": hf_texts, "logs": logs}
    record.update(sent=sent, training_ids=training_ids, decoded=trainer.processing_class.decode(sent[0]))
    out.write_text(json.dumps(record))


if __name__ == "__main__":
    main()
