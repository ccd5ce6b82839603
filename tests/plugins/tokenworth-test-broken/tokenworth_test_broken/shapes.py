"""Benchmark entries that are not a ``Benchmark`` value: a namespace with some of its attributes, and a dict."""

from types import SimpleNamespace

NAMESPACE = SimpleNamespace(name="namespace", instructions="Reply.", limits={})
MAPPING = {"name": "mapping", "instructions": "Reply.", "limits": {}}
