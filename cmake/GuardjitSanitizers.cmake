# GUARDJIT_SANITIZE: instrument guardjit's own code (every target this tree
# builds; LLVM, CPython and torch stay uninstrumented, as Debian and PyPI ship
# them). Values:
#   address,undefined   ASan + UBSan (LeakSanitizer included)
#   thread              TSan
# The CMake presets `asan` and `tsan` set it; scripts/sanitize.sh runs the
# tests under each (docs/sanitizers.md).
set(GUARDJIT_SANITIZE "" CACHE STRING
    "Sanitizers for guardjit's code: empty, 'address,undefined' or 'thread'")
set_property(CACHE GUARDJIT_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")

if(GUARDJIT_SANITIZE STREQUAL "")
  return()
elseif(GUARDJIT_SANITIZE STREQUAL "address,undefined")
  # vptr needs RTTI in every polymorphic base; LLVM is built without it.
  set(_gj_sanitize_flags -fsanitize=address,undefined -fno-sanitize=vptr
      -fno-sanitize-recover=undefined)
elseif(GUARDJIT_SANITIZE STREQUAL "thread")
  set(_gj_sanitize_flags -fsanitize=thread)
else()
  message(FATAL_ERROR "GUARDJIT_SANITIZE='${GUARDJIT_SANITIZE}': use "
                      "'address,undefined', 'thread' or nothing")
endif()
message(STATUS "guardjit: sanitizers ${GUARDJIT_SANITIZE}")
add_compile_options(${_gj_sanitize_flags} -fno-omit-frame-pointer -g)
add_link_options(${_gj_sanitize_flags})
