"""A ``Benchmark`` whose limits use --grid's short names (o_max, j_max, ...) instead of the budget's fields."""

from tokenworth_agent.plugin import Benchmark

from tokenworth_test_broken.common import fields

BENCHMARK = Benchmark(**fields("gridlimits", limits=dict(o_max=16, j_max=1, k_max=1, l_max=200)))
