"""`gspo-trl plan`: will a GSPO run fit, what dominates its memory, and what does it cost.

Arithmetic only: no GPU, no download. Every figure is an estimate from published accounting
(ZeRO, Korthikanti et al., Kaplan et al., vLLM PagedAttention), cited in each module.

    from gspo_trl.plan import format_plan, plan
    print(format_plan(plan({"per_device_train_batch_size": 8, "max_completion_length": 4096},
                           "Qwen/Qwen3-1.7B", strategy="zero2")))
"""

from gspo_trl.plan.model_shape import ModelShape, PlanError, load_model_shape, shipped_models
from gspo_trl.plan.planner import Plan, plan
from gspo_trl.plan.report import format_plan

__all__ = ["ModelShape", "Plan", "PlanError", "format_plan", "load_model_shape", "plan", "shipped_models"]
