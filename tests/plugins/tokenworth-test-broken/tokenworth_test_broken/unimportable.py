"""A module whose import fails (a dependency that is not installed): its benchmark, method and backbone."""

import tokenworth_test_no_such_dependency  # noqa: F401  (not installed anywhere, on purpose)

BENCHMARK = Method = Backbone = None
