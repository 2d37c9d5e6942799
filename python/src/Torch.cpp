//===- Torch.cpp - Torch state bindings -----------------------------------===//
//
// Mirrors of torch's thread-local and dispatch-key state that the native
// checks read (TensorFields.h, compiled against torch's headers, and
// TorchRuntime/TorchRuntime.h).
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "TensorFields.h"
#include "guardjit/TorchRuntime/TorchRuntime.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;
using namespace guardjit;

void guardjit::python::populateTorch(py::module_ &M) {
  M.def("set_in_mode_without_ignore_compile_internals",
        &setInModeWithoutIgnoreCompileInternals, py::arg("in_mode"),
        "Mirrors torch's thread-local of the same name for this thread.");
  M.def("apply_local_state", &applyLocalState, py::arg("keys"),
        py::arg("included"), py::arg("excluded"), py::arg("override"),
        py::arg("mask_python_keys"),
        "torch::dynamo::LocalState::apply(keys).raw_repr() for a LocalState "
        "given by its pickled fields (torch 2.14's RootGuardManager local "
        "state).");
  M.def("masks_python_keys", &masksPythonKeys,
        "Whether TENSOR_MATCH on this thread masks the Python dispatch keys.");
  M.def("tensor_layout_status", &tensorLayoutStatus,
        "'verified' when native code reads TENSOR_MATCH's TensorImpl fields "
        "inline; else the first offset that disagreed with torch on a probe "
        "tensor (TENSOR_MATCH then calls the helper).");
}
