# A kind row without all its columns must not compile (KindFacts.h expands
# Accessors.def and Guards.def with one macro parameter per column). Run as
#   cmake -DCXX=<compiler> -DSRC=<source dir> -DWORK=<scratch dir> -P this
# First the real .def files must compile; then, for each .def, a copy whose
# rows all lack their last column (Torch) must fail with a macro-arity error.
set(TU "${WORK}/tu.cpp")
file(WRITE "${TU}" "#include \"guardjit/IR/GuardSet.h\"\n")

function(compile_with Dir Result Output)
  execute_process(
    COMMAND "${CXX}" -std=c++20 -fsyntax-only -I "${Dir}" -I "${SRC}/include"
            "${TU}"
    RESULT_VARIABLE R OUTPUT_VARIABLE O ERROR_VARIABLE E)
  set(${Result} "${R}" PARENT_SCOPE)
  set(${Output} "${O}${E}" PARENT_SCOPE)
endfunction()

compile_with("${WORK}/none" R Out)
if(NOT R EQUAL 0)
  message(FATAL_ERROR "the complete .def files do not compile:\n${Out}")
endif()

foreach(Def Accessors Guards)
  set(Dir "${WORK}/${Def}")
  file(READ "${SRC}/include/guardjit/IR/${Def}.def" Text)
  string(REGEX REPLACE ",[ \n]*(NoTorch|NeedsTorch|TorchPayload)\\)" ")"
         Short "${Text}")
  if(Short STREQUAL Text)
    message(FATAL_ERROR "${Def}.def: found no Torch column to drop")
  endif()
  file(WRITE "${Dir}/guardjit/IR/${Def}.def" "${Short}")
  compile_with("${Dir}" R Out)
  if(R EQUAL 0)
    message(FATAL_ERROR "${Def}.def rows without a column compiled")
  endif()
  if(NOT Out MATCHES "requires [0-9]+ arguments|too few arguments")
    message(FATAL_ERROR "${Def}.def rows without a column failed, but not "
                        "on the macro's arity:\n${Out}")
  endif()
endforeach()
message(STATUS "rows without all their columns do not compile")
