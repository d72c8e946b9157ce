"""The demo's warm start is reused only when every input that made it is the same."""

from __future__ import annotations

from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)


def test_warm_start_is_cached_by_its_inputs(tmp_path) -> None:
    """`make demo` twice: the second run reuses the warm start; other settings train anew."""
    from gspo_trl.data.synthetic import ReversalTask
    from gspo_trl.demo.warm_start import CACHE_KEY_FILE, warm_start, warm_start_key
    from gspo_trl.model.tiny import save_tiny_model

    task = ReversalTask()
    base = save_tiny_model(tmp_path / "base")
    rebuilt = save_tiny_model(tmp_path / "rebuilt")  # the demo rebuilds the tiny model every run
    settings = {"steps": 2, "batch_size": 4, "learning_rate": 3e-3, "seed": 0}
    assert warm_start_key(base, task, settings) == warm_start_key(rebuilt, task, settings)
    assert warm_start_key(base, task, settings) != warm_start_key(base, task, {**settings, "steps": 3})
    assert warm_start_key(base, task, settings) != warm_start_key(base, ReversalTask(max_digits=8), settings)

    out = tmp_path / "warm"
    warm_start(base, out, task, steps=2, batch_size=4)
    weights = out / "model.safetensors"
    first = weights.stat().st_mtime_ns
    warm_start(rebuilt, out, task, steps=2, batch_size=4)
    assert weights.stat().st_mtime_ns == first  # reused, not retrained
    warm_start(base, out, task, steps=3, batch_size=4)
    assert weights.stat().st_mtime_ns != first
    assert '"steps": 3' in (out / CACHE_KEY_FILE).read_text()
