//===- Portable.cpp - The portable checker from Python --------------------===//
//
// portable_load: include/guardjit/portable.h's PortableSet::load over .gir
// text, so Python can check what a C++ host without Python will check (the
// serve bundle's tests, guardjit/serving.py). Inputs are described, not
// passed as tensors: this file is not compiled against torch's headers, and
// the portable checker reads no tensor data anyway.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "guardjit/portable.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

namespace py = pybind11;
using namespace guardjit::portable;

namespace {

/// One input of PortableSet::check, owning what its DLTensor points to.
struct DescribedInput {
  std::vector<int64_t> Shape, Strides;
  DLTensor T{};
  TensorExt Ext;
  std::string PyType;
  Input In;
};

void describe(py::handle D, DescribedInput &Out) {
  if (py::isinstance<py::int_>(D) && !py::isinstance<py::bool_>(D)) {
    Out.In.Int = D.cast<int64_t>();
    return;
  }
  if (py::isinstance<py::float_>(D)) {
    Out.In.Float = D.cast<double>();
    return;
  }
  auto Dict = D.cast<py::dict>();
  Out.Shape = Dict["sizes"].cast<std::vector<int64_t>>();
  Out.Strides = Dict["strides"].cast<std::vector<int64_t>>();
  if (Out.Strides.size() != Out.Shape.size())
    throw py::value_error("guardjit: 'sizes' and 'strides' differ in length");
  Out.T.data = reinterpret_cast<void *>(Dict["data_ptr"].cast<uintptr_t>());
  Out.T.device = {static_cast<DLDeviceType>(Dict["device_type"].cast<int>()),
                  Dict["device_id"].cast<int32_t>()};
  Out.T.ndim = static_cast<int32_t>(Out.Shape.size());
  Out.T.dtype = {Dict["code"].cast<uint8_t>(), Dict["bits"].cast<uint8_t>(), 1};
  Out.T.shape = Out.Shape.data();
  Out.T.strides = Out.Strides.data();
  Out.In.Tensor = &Out.T;
  if (Dict.contains("python_type")) {
    Out.PyType = Dict["python_type"].cast<std::string>();
    Out.Ext.RequiresGrad = Dict["requires_grad"].cast<bool>();
    Out.Ext.DispatchKeys = Dict["dispatch_keys"].cast<uint64_t>();
    Out.Ext.StorageOffset = Dict["storage_offset"].cast<int64_t>();
    Out.Ext.PythonType = Out.PyType.c_str();
    Out.In.Ext = &Out.Ext;
  }
}

} // namespace

void guardjit::python::populatePortable(py::module_ &M) {
  py::class_<PortableSet, std::shared_ptr<PortableSet>>(
      M, "PortableSet",
      "A guard set checked with no Python (include/guardjit/portable.h).")
      .def_property_readonly("name", &PortableSet::name)
      .def_property_readonly("num_guards", &PortableSet::numGuards)
      .def_property_readonly(
          "inputs",
          [](const PortableSet &S) {
            py::list Out;
            for (const InputInfo &I : S.inputs())
              Out.append(py::make_tuple(
                  I.Source, I.Kind == InputKind::Tensor ? "tensor"
                            : I.Kind == InputKind::Int  ? "int"
                                                        : "float"));
            return Out;
          },
          "[(Dynamo source, 'tensor' | 'int' | 'float')] in check()'s order.")
      .def(
          "check",
          [](const PortableSet &S, py::sequence Inputs,
             std::optional<std::string> GlobalJson) {
            std::vector<DescribedInput> Ds(py::len(Inputs));
            for (size_t K = 0; K < Ds.size(); ++K)
              describe(Inputs[K], Ds[K]);
            std::vector<Input> In;
            for (DescribedInput &D : Ds)
              In.push_back(D.In);
            GlobalStateRecord Global;
            std::string Error, Why;
            if (GlobalJson &&
                !GlobalStateRecord::parse(*GlobalJson, &Global, &Error))
              throw py::value_error("guardjit: global state: " + Error);
            bool Pass = false;
            if (!S.check(In.data(), In.size(), GlobalJson ? &Global : nullptr,
                         &Pass, &Error, &Why))
              throw py::value_error("guardjit: " + Error);
            return py::make_tuple(Pass, Why);
          },
          py::arg("inputs"), py::arg("global_state") = py::none(),
          "Checks the inputs (in `inputs` order): each a dict with 'sizes', "
          "'strides' (elements), 'code', 'bits' (DLDataType), 'device_type', "
          "'device_id' (DLDevice), 'data_ptr' and, for TensorExt, "
          "'requires_grad', 'dispatch_keys', 'python_type', "
          "'storage_offset'; or an int / float for a scalar input. "
          "`global_state`: GlobalStateGuard JSON, needed when the set has "
          "GLOBAL_STATE. Returns (passes, the first failing guard or ''); "
          "misuse raises ValueError.");

  M.def(
      "portable_load",
      [](const std::string &Text, const std::string &BufferName,
         bool RunFilter) {
        std::vector<std::unique_ptr<PortableSet>> Sets;
        std::string Error;
        if (!PortableSet::load(Text, BufferName, &Sets, &Error, RunFilter))
          throw py::value_error(Error);
        std::vector<std::shared_ptr<PortableSet>> Out;
        for (auto &S : Sets)
          Out.push_back(std::move(S));
        return Out;
      },
      py::arg("text"), py::arg("buffer_name") = "<gir>",
      py::arg("run_filter") = true,
      "PortableSet::load: every set of the .gir text (with its `gir torch=` "
      "header), keep_portable_guards_unsafe first unless run_filter is "
      "False. A parse error, another torch or a guard the portable check "
      "cannot evaluate raises ValueError with `file:line:col: error: ...`.");
}
