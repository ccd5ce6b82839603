"""Report helpers: the rolling-window SR behind the second panel of cumulative_sr.png."""

import numpy as np

from agent.results.report import cumulative_sr, rolling_sr, rolling_window


def test_rolling_sr_is_the_mean_of_the_last_window_tasks() -> None:
    records = [1, 0, 0, 1, 1, 1, 0, 0]
    np.testing.assert_allclose(rolling_sr(records, 4), [50.0, 50.0, 75.0, 75.0, 50.0])
    assert rolling_sr(records[:3], 4).size == 0
    np.testing.assert_allclose(cumulative_sr(records)[-1], 50.0)
    assert rolling_window(60) == 6 and rolling_window(20) == 5 and rolling_window(500) == 50
