//===- CodeProvider.cpp - What a check target asks of a code generator ----===//
#include "guardjit/Check/CodeProvider.h"

namespace guardjit {

// Out of line: the classes' vtables live here.
CheckCode::~CheckCode() = default;
CodeProvider::~CodeProvider() = default;

} // namespace guardjit
