//===- MainModule.cpp - guardjit._core ------------------------------------===//
//
// The module: one populate function per area (IRCore.cpp, Check.cpp,
// Pass.cpp, Torch.cpp, Attr.cpp, Portable.cpp), as MLIR's Python bindings
// are laid out.
// Errors from the C++ layers become Python exceptions with their message.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"
#include "BuildInfo.h"
#include "Logging.h"

#include "guardjit/TorchRuntime/TorchRuntime.h"

#include "llvm/Config/llvm-config.h"

#include <pybind11/pybind11.h>

namespace py = pybind11;
using namespace guardjit;

PYBIND11_MODULE(_core, M) {
  M.doc() = "guardjit native core: Guard IR, interpreter and LLVM ORC JIT.";

  // torch must be imported first (guardjit/__init__.py does), and be the
  // torch this module was compiled against.
  guardjit::python::checkTorchMatchesBuild(M);
  installTorchRuntime();

  // IR types first: later signatures name them.
  python::populateIRCore(M);
  python::populateCheck(M);
  python::populatePass(M);

  M.def(
      "set_log_level",
      [](const std::string &Name) {
        if (!setLogLevel(Name))
          throw py::value_error("guardjit: unknown log level '" + Name +
                                "' (debug, info, warning, error, critical, off)");
      },
      py::arg("level"),
      "Sets the C++ (spdlog) logger's level; guardjit/_logging.py sets it "
      "with the Python logger's from GUARDJIT_LOGS.");
  M.def("log_level", &logLevel, "The C++ logger's level name.");

  python::populateTorch(M);
  python::populateAttr(M);
  python::populatePortable(M);

  M.attr("PY_VERSION_HEX") = PY_VERSION_HEX;
  M.attr("LLVM_VERSION") = LLVM_VERSION_STRING;
}
