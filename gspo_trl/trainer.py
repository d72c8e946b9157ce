"""GSPOTrainer: TRL's GRPOTrainer with GSPO diagnostics; the loss stays TRL's."""

from __future__ import annotations

from typing import Any

from trl import GRPOTrainer

from gspo_trl.diagnostics import DiagnosticsConfig


class GSPOTrainer(GRPOTrainer):
    """GRPOTrainer plus GSPO diagnostics and GSPO-token (`gspo_token=True`)."""

    def __init__(
        self,
        *args: Any,
        gspo_token: bool = False,
        diagnostics: DiagnosticsConfig | None = None,
        **kwargs: Any,
    ) -> None:
        self.gspo_token = gspo_token
        self.diagnostics = diagnostics if diagnostics is not None else DiagnosticsConfig()
        super().__init__(*args, **kwargs)
