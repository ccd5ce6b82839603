"""The valid benchmark beside the broken ones, with one option of its own (``--words-strict``)."""

from tokenworth_agent.plugin import Benchmark, BenchmarkOption

from tokenworth_test_broken.common import fields

BENCHMARK = Benchmark(**fields("words", options=(BenchmarkOption("words_strict", bool, False, "words: an exact reply.",
                                                                 identity=True),),
                               description="Three questions answered with one word"))
