//===- DictReads.h - Memoized reads shared by runtime helpers ---*- C++ -*-===//
//
// Private to the Runtime library: the memoized getattr read, inline, for
// gj_rt_getattr_cached (DictReads.cpp) and the descriptor reads
// (ReadPlans.cpp). An exported function of a shared library is not inlined
// into another (it could be interposed), so the body lives here.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_LIB_RUNTIME_DICTREADS_H
#define GUARDJIT_LIB_RUNTIME_DICTREADS_H

#include "CPythonReads.h"
#include "guardjit/Runtime/RuntimeHelpers.h"

namespace guardjit {

/// gj_rt_getattr_cached: on an exact module with a __dict__ the memo hit
/// (the value INCREF'd) or gj_rt_module_getattr_fill; on anything else
/// gj_rt_getattr. A new reference or NULL.
inline PyObject *getattrCached(PyObject *Obj, PyObject *Name,
                               DictReadCache *Cache) {
  if (Py_TYPE(Obj) == &PyModule_Type) {
    PyObject *Dict = cpy::moduleDict(Obj);
    // An empty slot holds NULL: a NULL md_dict must not reach the memo test.
    if (Dict) {
      if (cpy::memoHit(Dict, *Cache))
        return Py_NewRef(Cache->Value);
      return gj_rt_module_getattr_fill(Obj, Name, Cache);
    }
  }
  return gj_rt_getattr(Obj, Name);
}

} // namespace guardjit

#endif // GUARDJIT_LIB_RUNTIME_DICTREADS_H
