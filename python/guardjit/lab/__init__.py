"""Tools that measure and check guardjit; not part of the product.

The product (``guardjit.compile``, the plugin and what it imports, the CLI)
lives at the top of the package and imports nothing from here, nor from
:mod:`guardjit.bench` or :mod:`guardjit.fuzz` (tests/python/test_package_layout.py).
The tests, the benchmarks, the fuzzer and ``scripts/`` share these:

* :mod:`.demo` - ``python -m guardjit demo``: the built-in models, Dynamo's
  check timed against guardjit's and mutated inputs replayed;
* :mod:`.timing` - interleaved A/B timing;
* :mod:`.frames` - the Python frames one check enters;
* :mod:`.routing` - which cache entry serves a call under
  ``skip_guard_eval_unsafe``, against a full lookup;
* :mod:`.girtext` - id-free views of ``.gir`` text, to compare two recordings.
"""
