//===- HeaderOnlyTU.cpp - guardjit.h with no LLVM and no Python -----------===//
//
// Compiled with include/ as its only include directory (CMakeLists.txt): the
// public header must not need LLVM's, pybind11's or CPython's headers.
//
//===----------------------------------------------------------------------===//
#include "guardjit/guardjit.h"

#if defined(Py_PYTHON_H) || defined(PY_SSIZE_T_CLEAN)
#error "guardjit.h included Python.h"
#endif
#if defined(LLVM_SUPPORT_ERROR_H) || defined(LLVM_ADT_STRINGREF_H) ||          \
    defined(LLVM_CONFIG_H)
#error "guardjit.h included an LLVM header"
#endif
#if defined(PYBIND11_VERSION_MAJOR)
#error "guardjit.h included pybind11"
#endif

/// Touches the API so that the header's declarations are used, not just
/// parsed: a Runtime cannot be created without CPython, and says so.
int headerOnlyProbe() {
  std::unique_ptr<guardjit::embed::Runtime> R;
  guardjit::embed::Status S =
      guardjit::embed::Runtime::create(guardjit::embed::RuntimeOptions(), &R);
  return !S.ok() && S.code() == guardjit::embed::ErrorCode::InvalidArgument &&
                 !R
             ? 0
             : 1;
}
