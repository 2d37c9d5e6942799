//===- Python.h - The one way guardjit includes CPython ---------*- C++ -*-===//
#ifndef GUARDJIT_RUNTIME_PYTHON_H
#define GUARDJIT_RUNTIME_PYTHON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030C0000
#error "guardjit's object layouts are verified for CPython 3.11 only"
#endif

#endif // GUARDJIT_RUNTIME_PYTHON_H
