"""A ``Benchmark`` whose fields have the wrong types: a text for its task source, a text for its environment."""

from tokenworth_agent.plugin import Benchmark

from tokenworth_test_broken.common import fields

BENCHMARK = Benchmark(**fields("badfields", tasks="str", make_environment="nope"))
