//===- Attr.cpp - Known attribute function bindings -----------------------===//
//
// Registration of the Python attribute functions guardjit reads natively
// (Runtime/PythonAttr.h): nn.Module.__getattr__, transformers' config
// __getattribute__, nn.ModuleList.__getitem__ for subtree skipping.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "guardjit/Runtime/PythonAttr.h"
#include "guardjit/Runtime/SubtreeSkip.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;
using namespace guardjit;

void guardjit::python::populateAttr(py::module_ &M) {
  M.def(
      "register_modulelist_getitem",
      [](py::handle GetItem, py::handle AbsIndex, py::handle Len) {
        std::string Err;
        if (!registerModuleListGetItem(GetItem.ptr(), AbsIndex.ptr(), Len.ptr(),
                                       &Err))
          throw py::type_error(Err);
      },
      "Registers torch.nn.ModuleList's __getitem__, _get_abs_string_index "
      "and __len__ (checked by pyattr.py) for subtree skipping.");

  M.def(
      "register_module_getattr",
      [](py::handle Fn) {
        std::string Error;
        if (!registerModuleGetattr(Fn.ptr(), &Error))
          throw py::value_error("guardjit: " + Error);
      },
      py::arg("fn"),
      "Registers torch.nn.Module.__getattr__ for native getattr/hasattr "
      "(Runtime/PythonAttr.h). The caller checked its bytecode (pyattr.py).");
  M.def(
      "register_config_getattribute",
      [](py::handle Outer, py::handle Inner) {
        std::string Error;
        if (!registerConfigGetattribute(Outer.ptr(), Inner.ptr(), &Error))
          throw py::value_error("guardjit: " + Error);
      },
      py::arg("outer"), py::arg("inner"),
      "Registers transformers' PreTrainedConfig.__getattribute__ and the "
      "__getattribute__ its super() finds (HeterogeneousConfigMixin's).");
  M.def("unregister_known_attr_functions", &unregisterKnownAttrFunctions,
        "Drops both registrations: every read runs CPython's path.");
  M.def(
      "known_attr_stats",
      [] {
        KnownAttrStats S = knownAttrStats();
        py::dict D;
        D["module_reads"] = S.ModuleReads;
        D["config_reads"] = S.ConfigReads;
        D["delegated"] = S.Delegated;
        return D;
      },
      "Attribute reads decided natively per registered function, and reads "
      "of those types handed back to CPython, since the last reset.");
  M.def("reset_known_attr_stats", &resetKnownAttrStats);
}
