"""``python -m guardjit bench``: guardjit against Dynamo on a corpus of real models.

* :mod:`guardjit.bench.corpus` - the models (built locally, no downloads);
* :mod:`guardjit.bench.run` - the measurements (interleaved, one process);
* :mod:`guardjit.bench.report` - table, JSON and plot.
"""
