//===- BuildInfo.h - The torch guardjit._core was built against -*- C++ -*-===//
//
// _core is compiled against one torch release's headers and links its
// libraries: TensorImpl layouts, dispatch-key bits and Dynamo's guard classes
// are those of that build. Loaded under another torch it would read the wrong
// fields, so the module refuses to initialise there (python/guardjit/_compat.py
// refuses earlier still, from guardjit/_build_info.py, without loading _core).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_PYTHON_BUILDINFO_H
#define GUARDJIT_PYTHON_BUILDINFO_H

#include <pybind11/pybind11.h>

namespace guardjit::python {

/// Sets TORCH_VERSION, TORCH_GIT_VERSION and TORCH_CXX11_ABI on \p M (what
/// this build was compiled against), then compares them with the imported
/// torch (`torch.__version__`, `torch.version.git_version`,
/// `torch.compiled_with_cxx11_abi()`). GIL held; torch must be imported.
/// Throws pybind11::import_error naming both builds on a mismatch.
void checkTorchMatchesBuild(pybind11::module_ &M);

} // namespace guardjit::python

#endif // GUARDJIT_PYTHON_BUILDINFO_H
