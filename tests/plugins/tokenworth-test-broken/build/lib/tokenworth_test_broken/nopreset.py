"""A ``Benchmark`` that leaves ``controller_preset`` at its default, under a name that is no library preset."""

from tokenworth_agent.plugin import Benchmark

from tokenworth_test_broken.common import fields

changes = fields("nopreset")
del changes["controller_preset"]
BENCHMARK = Benchmark(**changes)
