"""A valid ``Benchmark`` named ``realname``, registered as ``alias``."""

from tokenworth_agent.plugin import Benchmark

from tokenworth_test_broken.common import fields

BENCHMARK = Benchmark(**fields("realname"))
