"""Held-out evaluation through the run's colocated vLLM engine vs HF generate, on one trainer.

python tests/_heldout_vllm_run.py OUT.json MODEL_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.shipped import RECIPES_DIR
from gspo_trl.eval.generation import generate_completions
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
    }
    trainer = build_trainer(load_recipe(RECIPES_DIR / "tiny" / "reversal.yaml", overrides))
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, HeldoutCallback))
    callback.ks = ()
    prompts = callback.dataset["prompt"]
    with heldout_generator(trainer, callback._sampling()) as generator:
        engine = generator.engine
        engine_texts = generator.generate(prompts, 1, 0.0)
    model = trainer.accelerator.unwrap_model(trainer.model)
    hf_texts = generate_completions(model, trainer.processing_class, prompts, callback.max_new_tokens)
    logs = callback.evaluate()
    out.write_text(json.dumps({"engine": engine, "vllm": engine_texts, "hf": hf_texts, "logs": logs}))


if __name__ == "__main__":
    main()
