# Finds every external dependency once, for all targets.
# LLVM 19 from Debian (llvm-19-dev). "19" alone is rejected by
# LLVMConfigVersion.cmake (major.minor match), and llvm-14 may be installed too.
find_package(LLVM 19.1 REQUIRED CONFIG HINTS /usr/lib/llvm-19/lib/cmake/llvm)
message(STATUS "guardjit: LLVM ${LLVM_PACKAGE_VERSION} from ${LLVM_DIR}")
separate_arguments(GUARDJIT_LLVM_DEFINITIONS NATIVE_COMMAND ${LLVM_DEFINITIONS})

# guardjit_llvm: the LLVM guardjit links. By default (GUARDJIT_LLVM_STATIC)
# only the components guardjit uses, statically: in the Python module their
# symbols are hidden (python/CMakeLists.txt), and executables export none.
# Two reasons. Debian's shared libLLVM.so.19.1 (129 MB, every target and
# component) costs ~42 MB of resident memory at import (docs/performance.md
# "Import cost"). And its exported symbols interpose on other LLVMs in the
# process: torch 2.14.1's CUDA build imports triton, whose libtriton.so links
# an LLVM of its own, and a host linked against libLLVM.so crashed in
# libtriton's static constructors (tools/guardjit-host, torch 2.14.1).
# GUARDJIT_LLVM_STATIC=OFF links libLLVM.so (faster links, for C++-only work).
option(GUARDJIT_LLVM_STATIC "Link LLVM's static component libraries instead of libLLVM.so" ON)
add_library(guardjit_llvm INTERFACE)
if(GUARDJIT_LLVM_STATIC)
  llvm_map_components_to_libnames(_gj_llvm_libs
    orcjit jitlink passes core object support native nativecodegen)
  target_link_libraries(guardjit_llvm INTERFACE ${_gj_llvm_libs})
else()
  target_link_libraries(guardjit_llvm INTERFACE LLVM)
endif()

# The pyenv CPython first on PATH, not Debian's python3-dev.
# Development.Embed only for executables: the GoogleTest binaries and the
# micro-benchmarks, which embed CPython, and guard-ir-opt, which links
# libpython for the runtime helpers.
set(_gj_py_components Interpreter Development.Module)
if(GUARDJIT_BUILD_TESTS OR GUARDJIT_BUILD_TOOLS OR GUARDJIT_BUILD_BENCH)
  list(APPEND _gj_py_components Development.Embed)
endif()
find_package(Python3 3.11 REQUIRED COMPONENTS ${_gj_py_components})

# spdlog (Debian libspdlog-dev) for logging controlled by GUARDJIT_LOGS.
find_package(spdlog CONFIG REQUIRED)

# torch: headers and libraries of the installed wheel (a release guardjit
# verifies: 2.13.0 or 2.14.1; python/guardjit/_compat.py). Its version, git
# revision and C++ ABI are recorded in guardjit._build_info and in _core, which
# refuse to run under any other torch.
execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c
          "import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch.compiled_with_cxx11_abi())); print(torch.__version__); print(torch.version.git_version)"
  OUTPUT_VARIABLE _gj_torch_out
  RESULT_VARIABLE _gj_torch_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _gj_torch_rc EQUAL 0)
  message(FATAL_ERROR "guardjit: cannot import torch with ${Python3_EXECUTABLE}; "
    "install torch 2.13.0 or 2.14.1 first, then build without build isolation "
    "(pip install --no-build-isolation .), so that guardjit compiles against that torch")
endif()
string(REPLACE "\n" ";" _gj_torch_out "${_gj_torch_out}")
list(GET _gj_torch_out 0 GUARDJIT_TORCH_DIR)
list(GET _gj_torch_out 1 GUARDJIT_TORCH_CXX11_ABI)
list(GET _gj_torch_out 2 GUARDJIT_TORCH_VERSION)
list(GET _gj_torch_out 3 GUARDJIT_TORCH_GIT_VERSION)
string(REGEX REPLACE "\\+.*$" "" GUARDJIT_TORCH_RELEASE "${GUARDJIT_TORCH_VERSION}")
# The Guard IR corpus recorded under this release (scripts/regen-corpus.sh);
# C++ tests and benchmarks read it. A release being ported has none yet: they
# read the oldest verified release's, which is only text to them.
set(GUARDJIT_CORPUS_DIR "${PROJECT_SOURCE_DIR}/tests/corpus/torch-${GUARDJIT_TORCH_RELEASE}")
if(NOT IS_DIRECTORY "${GUARDJIT_CORPUS_DIR}")
  message(WARNING "guardjit: no corpus for torch ${GUARDJIT_TORCH_RELEASE} yet "
    "(scripts/regen-corpus.sh, docs/porting.md); C++ tests read torch 2.13.0's")
  set(GUARDJIT_CORPUS_DIR "${PROJECT_SOURCE_DIR}/tests/corpus/torch-2.13.0")
endif()
message(STATUS "guardjit: torch ${GUARDJIT_TORCH_VERSION} at ${GUARDJIT_TORCH_DIR}")
add_library(guardjit_torch_deps INTERFACE)
target_include_directories(guardjit_torch_deps SYSTEM INTERFACE
  "${GUARDJIT_TORCH_DIR}/include"
  "${GUARDJIT_TORCH_DIR}/include/torch/csrc/api/include")
target_compile_definitions(guardjit_torch_deps INTERFACE
  _GLIBCXX_USE_CXX11_ABI=${GUARDJIT_TORCH_CXX11_ABI})
target_link_directories(guardjit_torch_deps INTERFACE "${GUARDJIT_TORCH_DIR}/lib")
target_link_libraries(guardjit_torch_deps INTERFACE c10 torch_cpu torch_python)
# torch 2.14's ATen headers #error below C++20; 2.13's build as C++20 too, so
# every target compiled against torch's headers is C++20 with either release.
target_compile_features(guardjit_torch_deps INTERFACE cxx_std_20)
# What _core records of the torch it is built against (python/src/BuildInfo.h).
target_compile_definitions(guardjit_torch_deps INTERFACE
  GUARDJIT_TORCH_VERSION="${GUARDJIT_TORCH_VERSION}"
  GUARDJIT_TORCH_GIT_VERSION="${GUARDJIT_TORCH_GIT_VERSION}"
  GUARDJIT_TORCH_CXX11_ABI=${GUARDJIT_TORCH_CXX11_ABI})

if(GUARDJIT_BUILD_PYTHON)
  # pybind11 3.x from PyPI: Debian's 2.10 config does not load with CMake 4.
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c "import pybind11; print(pybind11.get_cmake_dir())"
    OUTPUT_VARIABLE _gj_pybind11_dir OUTPUT_STRIP_TRAILING_WHITESPACE)
  find_package(pybind11 3 CONFIG REQUIRED HINTS "${_gj_pybind11_dir}")
endif()

if(GUARDJIT_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_program(GUARDJIT_FILECHECK FileCheck HINTS "${LLVM_TOOLS_BINARY_DIR}" REQUIRED)
  find_program(GUARDJIT_LIT NAMES lit llvm-lit HINTS "${LLVM_TOOLS_BINARY_DIR}" REQUIRED)
endif()
if(GUARDJIT_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
