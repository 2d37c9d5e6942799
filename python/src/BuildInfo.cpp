//===- BuildInfo.cpp - The torch guardjit._core was built against ---------===//
#include "BuildInfo.h"

#include <string>

namespace py = pybind11;

void guardjit::python::checkTorchMatchesBuild(py::module_ &M) {
  M.attr("TORCH_VERSION") = GUARDJIT_TORCH_VERSION;
  M.attr("TORCH_GIT_VERSION") = GUARDJIT_TORCH_GIT_VERSION;
  M.attr("TORCH_CXX11_ABI") = bool(GUARDJIT_TORCH_CXX11_ABI);

  py::module_ Torch = py::module_::import("torch");
  std::string Version = py::str(Torch.attr("__version__"));
  std::string Git = py::str(Torch.attr("version").attr("git_version"));
  bool Abi = py::cast<bool>(Torch.attr("compiled_with_cxx11_abi")());
  if (Version == GUARDJIT_TORCH_VERSION && Git == GUARDJIT_TORCH_GIT_VERSION &&
      Abi == bool(GUARDJIT_TORCH_CXX11_ABI))
    return;
  throw py::import_error(
      std::string("guardjit._core was built against torch ") +
      GUARDJIT_TORCH_VERSION + " (git " + GUARDJIT_TORCH_GIT_VERSION +
      ", cxx11abi=" + (GUARDJIT_TORCH_CXX11_ABI ? "1" : "0") +
      ") and this process runs torch " + Version + " (git " + Git +
      ", cxx11abi=" + (Abi ? "1" : "0") +
      "); rebuild guardjit against this torch: pip install "
      "--no-build-isolation --no-deps --force-reinstall .");
}
