"""The torch options ``python -m guardjit bench`` measures, named once.

The six ``guard_filter_fn`` filters of ``torch.compiler`` come from
``_core.registered_passes()`` (Passes.def registers each as a guardjit pass
of the same name, ``torch_filter`` set), in Passes.def's order. Every other
module of the bench (and the fuzzer) takes the names, their order and their
short labels from here.
"""

from __future__ import annotations

import torch

from guardjit import _core

# torch's six guard_filter_fn helpers, in Passes.def's order.
FILTERS: tuple[str, ...] = tuple(e["name"] for e in _core.registered_passes()
                                 if e["torch_filter"])
CONFIG_OPTIONS = ("install_free_tensors", "use_recursive_dict_tags_for_guards")
STANCE = "skip_guard_eval_unsafe"
# torch's two unsafe options together (the guide's recommendation), measured
# against guardjit's sound check and lookup of the same model.
UNSAFE = "install_free_tensors+skip_guard_on_all_nn_modules_unsafe"
OPTIONS = CONFIG_OPTIONS[:1] + FILTERS + CONFIG_OPTIONS[1:] + (STANCE, UNSAFE)
# Options whose entry also carries torch's own lookup (``lookup_us``) and
# check (``check_us``) under that option, measured beside guardjit's default:
# torch's dict-tag fast path, the two unsafe options together and
# the floor, a unit with no guards at all.
# The floor: torch with no guards at all, whose whole call every model's
# call_overhead_vs_floor is measured against.
FLOOR = "skip_all_guards_unsafe"
LOOKUP_OPTIONS = ("use_recursive_dict_tags_for_guards", UNSAFE, FLOOR)

# Column labels of the report's tables.
LABELS = {
    "install_free_tensors": "free-tensors",
    "skip_guard_on_inbuilt_nn_modules_unsafe": "skip-inbuilt-nn",
    "skip_guard_on_all_nn_modules_unsafe": "skip-all-nn",
    "keep_tensor_guards_unsafe": "keep-tensor",
    "keep_portable_guards_unsafe": "keep-portable",
    "skip_guard_on_globals_unsafe": "skip-globals",
    "skip_all_guards_unsafe": "skip-all",
    "use_recursive_dict_tags_for_guards": "dict-tags",
    STANCE: "skip-eval stance",
    UNSAFE: "torch free-tensors+skip-all-nn vs guardjit sound",
}


def option_kwargs(name: str) -> tuple[dict, dict]:
    """(torch.compile kwargs, torch._dynamo.config patch) of one option."""
    if name in FILTERS:
        return {"options": {"guard_filter_fn": getattr(torch.compiler, name)}}, {}
    if name in CONFIG_OPTIONS:
        return {}, {name: True}
    if name == UNSAFE:
        return ({"options": {"guard_filter_fn":
                             torch.compiler.skip_guard_on_all_nn_modules_unsafe}},
                {"install_free_tensors": True})
    raise KeyError(name)
