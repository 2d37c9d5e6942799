"""The mutation fuzzer at the check level (``python -m guardjit fuzz``; docs/fuzzing.md).

One concept per module: :mod:`.programs` (generated programs),
:mod:`.targets` (compiled targets and their checkers under each plugin
option), :mod:`.mutations` (random undoable mutations), :mod:`.oracle`
(Dynamo's root vs guardjit's interpreter, native check and installed root),
:mod:`.e2e` (the end-to-end sample), :mod:`.stance_oracle` (the routing rule
under ``skip_guard_eval_unsafe``), :mod:`.reproducer` (minimize, write,
replay) and :mod:`.driver` (the run and the CLI).
"""
