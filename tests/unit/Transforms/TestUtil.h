//===- TestUtil.h - Shared helpers of the Transforms tests ------*- C++ -*-===//
//
// An embedded CPython, a builder of guard sets over live objects, and the
// check every structural pass must pass: the interpreter answers the same
// before and after the pass on every given frame-locals dict.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TESTS_UNIT_TRANSFORMS_TESTUTIL_H
#define GUARDJIT_TESTS_UNIT_TRANSFORMS_TESTUTIL_H

#include "guardjit/IR/GuardSet.h"
#include "guardjit/IR/Printer.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/ObjectFacts.h"
#include "guardjit/Transforms/Pass.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace guardjit::test {

/// Runs statements in the shared namespace (CPython initialized once).
void exec(const char *Code);
/// Evaluates an expression; a new reference.
PyObject *eval(const char *Expr);

/// Builds a guard set over live objects; keeps them alive.
class SetBuilder {
public:
  SetBuilder();
  ~SetBuilder();
  ObjectId object(PyObject *O, ObjectKind Kind = ObjectKind::Object,
                  bool Strong = true);
  /// The object an expression evaluates to.
  ObjectId object(const char *Expr, ObjectKind Kind = ObjectKind::Object);
  ObjectId str(const char *S) {
    return object((std::string("'") + S + "'").c_str(), ObjectKind::Key);
  }
  ValueId value(AccessorKind Kind, ValueId Parent, ObjectId Key = InvalidId,
                int64_t Index = -1, std::string Source = "");
  ValueId local(const char *Name);
  ValueId attr(ValueId Parent, const char *Name) {
    return value(AccessorKind::GetAttr, Parent, str(Name), -1,
                 std::string("getattr ") + Name);
  }
  Guard &guard(GuardKind Kind, std::vector<ValueId> Operands,
               ObjectId Object = InvalidId, int64_t Int = 0,
               uint32_t Origin = InvalidId);
  uint32_t origin(std::string GuardType, bool IsGlobal = false);
  GuardSet &set() { return *S; }

private:
  std::shared_ptr<GuardSet> S;
  std::vector<PyObject *> Keep;
};

/// The facts the plugin gives the passes (Runtime/ObjectFacts.h).
PassContext liveContext();

/// The interpreter's answer for `S` on a frame-locals dict expression.
bool answer(const GuardSet &S, const char *LocalsExpr);

/// Runs `P` on a copy of `S`, checks that the interpreter answers as before
/// on every locals expression, and returns the transformed copy.
GuardSet runAndCompare(Pass &P, const GuardSet &S,
                       const std::vector<const char *> &Locals,
                       const PassContext &Ctx = PassContext());

/// The guard lines of the printed set (values and objects left out).
std::vector<std::string> guardLines(const GuardSet &S);

} // namespace guardjit::test

#endif // GUARDJIT_TESTS_UNIT_TRANSFORMS_TESTUTIL_H
