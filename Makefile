# Two commands on a fresh machine: `make demo` (the main job on CPU) and `make test`.
# Both create .venv and install what they need; torch is pinned first so that no
# later install can pull a CUDA build of torch onto a CPU machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: demo test lint install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	@# bubblewrap is the code sandbox of choice; without it rewards.code falls back to rlimits.
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; } || \
		echo "warning: bubblewrap not installed; code rewards use the rlimit fallback sandbox"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/gspo-trl demo --output-dir runs/demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -ra --durations=15

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) runs .pytest_cache
