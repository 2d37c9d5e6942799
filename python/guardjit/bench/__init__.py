"""``python -m guardjit bench``: guardjit against Dynamo on a corpus of real models.

* :mod:`guardjit.bench.corpus` - the models (built locally, no downloads);
* :mod:`guardjit.bench.options` - the torch options measured, their labels;
* :mod:`guardjit.bench.capture` - both roots and the frame locals of every
  compile unit;
* :mod:`guardjit.bench.lookup` - the "TorchDynamo Cache Lookup" profiler event;
* :mod:`guardjit.bench.run` - the measurements (interleaved, one process),
  with :mod:`guardjit.bench.passes` (the pass pipeline) as one step;
* :mod:`guardjit.bench.report` - table, JSON and plot.

The other suites: :mod:`.diffsets` (with :mod:`.scenarios`,
:mod:`.diffsets_worker` and :mod:`.diffsets_report`), :mod:`.memory`,
:mod:`.latency`, :mod:`.generate` (a transformers ``generate()`` decode loop);
:mod:`.cachelines` and :mod:`.fixed_cost` run as scripts.
"""
