# tools/guardjit-serve links the wheel's libtorch without CPython. Built when
# the Torch CMake package of the torch that Python3_EXECUTABLE imports is
# found (torch.utils.cmake_prefix_path); GUARDJIT_BUILD_SERVE overrides.
#
# Found, not loaded: TorchConfig.cmake defines global-looking targets named
# `torch`, `torch_cpu` and `c10` (their interface adds protobuf::libprotobuf
# and caffe2::mkl) and warns about a missing kineto, while
# guardjit_torch_deps links the plain names c10 / torch_cpu. The host needs
# only what AOTInductor's loader needs, so guardjit_serve_torch names those
# three libraries of the package's prefix directly, and never torch_python.
execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
  OUTPUT_VARIABLE _gj_torch_prefix
  RESULT_VARIABLE _gj_torch_prefix_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
set(GUARDJIT_TORCH_CONFIG "")
if(_gj_torch_prefix_rc EQUAL 0 AND EXISTS "${_gj_torch_prefix}/Torch/TorchConfig.cmake")
  set(GUARDJIT_TORCH_CONFIG "${_gj_torch_prefix}/Torch/TorchConfig.cmake")
endif()
set(_gj_serve_default OFF)
if(GUARDJIT_TORCH_CONFIG)
  set(_gj_serve_default ON)
endif()
option(GUARDJIT_BUILD_SERVE
  "Build tools/guardjit-serve (needs the Torch CMake package of the wheel)"
  ${_gj_serve_default})

if(GUARDJIT_BUILD_SERVE)
  if(NOT GUARDJIT_TORCH_CONFIG)
    message(FATAL_ERROR "GUARDJIT_BUILD_SERVE=ON but no TorchConfig.cmake under "
      "torch.utils.cmake_prefix_path of ${Python3_EXECUTABLE}")
  endif()
  # <prefix>/share/cmake/Torch/TorchConfig.cmake -> <prefix>
  get_filename_component(_gj_torch_root "${GUARDJIT_TORCH_CONFIG}/../../../.." ABSOLUTE)
  set(GUARDJIT_SERVE_TORCH_LIBDIR "${_gj_torch_root}/lib")
  add_library(guardjit_serve_torch INTERFACE)
  target_include_directories(guardjit_serve_torch SYSTEM INTERFACE
    "${_gj_torch_root}/include"
    "${_gj_torch_root}/include/torch/csrc/api/include")
  target_compile_definitions(guardjit_serve_torch INTERFACE
    _GLIBCXX_USE_CXX11_ABI=${GUARDJIT_TORCH_CXX11_ABI})
  target_compile_features(guardjit_serve_torch INTERFACE cxx_std_20)
  foreach(_gj_lib torch torch_cpu c10)
    if(NOT EXISTS "${GUARDJIT_SERVE_TORCH_LIBDIR}/lib${_gj_lib}.so")
      message(FATAL_ERROR "guardjit-serve: ${GUARDJIT_SERVE_TORCH_LIBDIR}/lib${_gj_lib}.so not found")
    endif()
    target_link_libraries(guardjit_serve_torch INTERFACE
      "${GUARDJIT_SERVE_TORCH_LIBDIR}/lib${_gj_lib}.so")
  endforeach()
  message(STATUS "guardjit: tools/guardjit-serve with ${GUARDJIT_TORCH_CONFIG}")
else()
  message(STATUS "guardjit: tools/guardjit-serve skipped: no Torch CMake package "
    "(torch.utils.cmake_prefix_path of ${Python3_EXECUTABLE}) or GUARDJIT_BUILD_SERVE=OFF")
endif()
