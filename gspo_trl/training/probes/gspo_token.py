"""GSPO-token (`GSPOConfig(gspo_token=True)`, with `importance_sampling_level="token"`).

TRL reads `inputs["old_per_token_logps"]` after computing `per_token_logps` (trl/trainer/grpo_trainer.py:3030,
then `old_per_token_logps = inputs.get("old_per_token_logps")`); this probe sets it, in the loss's
own copy of the minibatch, to `per_token_logps.detach() - sg[log s_i]`, so TRL's token ratio
becomes exp(sg[log s_i] + logp_it - sg[logp_it]): every token carries the value (and the clip
decision) of s_i, while the gradient flows through each token's log-prob with its own advantage
A_it. The buffer TRL reuses (num_iterations > 1) keeps the true old log-probs.
"""

from __future__ import annotations

from typing import Any

from gspo_trl.training.probes.base import PolicyForward, Probe


class GspoTokenProbe(Probe):
    """Rewrites pi_old in the loss's inputs so that TRL's token ratio is GSPO-token's."""

    def on_policy_forward(self, trainer: Any, policy: PolicyForward) -> None:
        policy.loss.inputs["old_per_token_logps"] = policy.logps - policy.log_s.unsqueeze(-1)
