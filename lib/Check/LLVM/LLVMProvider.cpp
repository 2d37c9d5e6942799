//===- LLVMProvider.cpp - GuardJIT as a CodeProvider ----------------------===//
#include "guardjit/Check/LLVMProvider.h"

#include "guardjit/JIT/Engine.h"

#include "llvm/Support/Error.h"

namespace guardjit {
namespace {

class LLVMCheckCode final : public CheckCode {
public:
  LLVMCheckCode(std::shared_ptr<CompiledCheck> C,
                std::shared_ptr<GuardJIT> Engine)
      : Engine(std::move(Engine)), C(std::move(C)) {}
  CheckFn function() const override { return C->function(); }
  int level() const override { return static_cast<int>(C->level()); }
  CodeStats stats() const override {
    const CompileStats &S = C->stats();
    CodeStats Out;
    Out.LowerMs = S.LowerMs;
    Out.CompileMs = S.CompileMs;
    Out.NumGuards = S.NumGuards;
    Out.NumInlined = S.NumInlined;
    Out.NumHelpers = S.NumHelpers;
    Out.CacheHit = S.CacheHit;
    Out.CacheMs = S.CacheMs;
    return Out;
  }
  const CompiledCheck &compiled() const { return *C; }

private:
  // Declared first, destroyed last: the code is removed from its engine.
  std::shared_ptr<GuardJIT> Engine;
  std::shared_ptr<CompiledCheck> C;
};

class LLVMProvider final : public CodeProvider {
public:
  explicit LLVMProvider(std::shared_ptr<GuardJIT> Engine)
      : Engine(std::move(Engine)) {}
  int level() const override {
    return static_cast<int>(Engine->options().Level);
  }
  std::string levelName() const override {
    return optLevelName(Engine->options().Level);
  }
  std::shared_ptr<CheckCode> compile(const BoundGuardSet &Set,
                                     std::string *Error) override {
    llvm::Expected<std::unique_ptr<CompiledCheck>> C = Engine->compile(Set);
    if (!C) {
      *Error = llvm::toString(C.takeError());
      return nullptr;
    }
    return std::make_shared<LLVMCheckCode>(std::move(*C), Engine);
  }

private:
  std::shared_ptr<GuardJIT> Engine;
};

} // namespace

std::shared_ptr<CodeProvider>
makeLLVMProvider(std::shared_ptr<GuardJIT> Engine) {
  return std::make_shared<LLVMProvider>(std::move(Engine));
}

std::shared_ptr<CheckCode>
wrapCompiledCheck(std::shared_ptr<CompiledCheck> Code) {
  return std::make_shared<LLVMCheckCode>(std::move(Code), nullptr);
}

const CompiledCheck *compiledCheckOf(const CheckCode &Code) {
  if (auto *L = dynamic_cast<const LLVMCheckCode *>(&Code))
    return &L->compiled();
  return nullptr;
}

} // namespace guardjit
