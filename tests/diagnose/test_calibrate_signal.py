"""`gspo-trl calibrate` recommends no epsilon when too few responses carry signal."""

from __future__ import annotations

import pytest

from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)


@pytest.mark.parametrize(("signed_rows", "recommends"), [(0, False), (3, False), (100, True)])
def test_calibrate_recommends_nothing_when_too_few_responses_carry_signal(signed_rows, recommends) -> None:
    """Seen before: 'too few to judge' followed by a recommended eps computed from tied groups."""
    import torch

    from gspo_trl.diagnose import calibrate
    from gspo_trl.training.ratio_stats import ROW_COLUMNS

    generator = torch.Generator().manual_seed(0)
    rows = torch.zeros(100, len(ROW_COLUMNS))
    rows[:, 0] = torch.randn(100, generator=generator) * 1e-3  # log s_i
    rows[:signed_rows, 1] = torch.tensor([1.0, -1.0]).repeat(50)[:signed_rows]  # advantages
    rows[:, 2], rows[:, 5] = 20, 1  # length, valid
    text = calibrate.analyse_rows([(2, rows)], (3e-4, 4e-4), (0.15, 0.25), (64,))
    assert ("recommended" in text) is recommends, text
    assert ("too few to judge" in text) is not recommends
    assert ("No recommendation:" in text) is not recommends
