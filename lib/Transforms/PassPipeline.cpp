//===- PassPipeline.cpp - Parse and run -passes= pipelines ----------------===//
#include "guardjit/Transforms/PassPipeline.h"

#include "guardjit/IR/Verifier.h"
#include "guardjit/Transforms/CSE.h"
#include "guardjit/Transforms/DeadValues.h"
#include "guardjit/Transforms/Dedup.h"
#include "guardjit/Transforms/DiffSet.h"
#include "guardjit/Transforms/FoldImplied.h"
#include "guardjit/Transforms/GuardFilters.h"
#include "guardjit/Transforms/Order.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <chrono>

using namespace guardjit;
using namespace llvm;

Pass::~Pass() = default;

char PipelineError::ID = 0;

void PipelineError::log(raw_ostream &OS) const {
  OS << "column " << Column + 1 << ": " << Message;
}

std::error_code PipelineError::convertToErrorCode() const {
  return inconvertibleErrorCode();
}

namespace {

struct PassInfo {
  StringLiteral Name;
  StringLiteral Params; ///< ';'-separated flag names, "" for none
  StringLiteral Description;
  std::unique_ptr<Pass> (*Create)(const PassParams &);
};

template <typename T> std::unique_ptr<Pass> createPass(const PassParams &) {
  return std::make_unique<T>();
}
template <typename T>
std::unique_ptr<Pass> createPassWithParams(const PassParams &P) {
  return std::make_unique<T>(P);
}

const PassInfo Registry[] = {
#define GJ_PASS(Name, Class, Description)                                      \
  {Name, "", Description, &createPass<Class>},
#define GJ_PASS_WITH_PARAMS(Name, Class, Params, Description)                  \
  {Name, Params, Description, &createPassWithParams<Class>},
#include "guardjit/Transforms/Passes.def"
};

struct MultiSetPassInfo {
  StringLiteral Name;
  StringLiteral Params; ///< '|'-separated values, the first the default
  StringLiteral Description;
  std::unique_ptr<MultiSetPass> (*Create)(StringRef Param);
};

template <typename T>
std::unique_ptr<MultiSetPass> createMultiSetPass(StringRef Param) {
  return std::make_unique<T>(Param);
}

const MultiSetPassInfo MultiSetRegistry[] = {
#define GJ_MULTISET_PASS(Name, Class, Params, Description)                     \
  {Name, Params, Description, &createMultiSetPass<Class>},
#include "guardjit/Transforms/Passes.def"
};

struct PipelineInfo {
  StringLiteral Name;
  StringLiteral Expansion;
  StringLiteral Description;
};

const PipelineInfo Pipelines[] = {
#define GJ_PIPELINE(Name, Expansion, Description)                              \
  {Name, Expansion, Description},
#include "guardjit/Transforms/Passes.def"
};

Error errorAt(size_t Column, const Twine &Message) {
  return make_error<PipelineError>(Column, Message.str());
}

/// One element of the text: `name` or `name<params>`, at byte Column.
struct Element {
  StringRef Name;
  StringRef Params; ///< without the brackets
  bool HasParams = false;
  size_t Column = 0;
  size_t ParamsColumn = 0;
};

Expected<std::vector<Element>> splitPipeline(StringRef Text) {
  std::vector<Element> Out;
  size_t Pos = 0;
  while (true) {
    Element E;
    E.Column = Pos;
    size_t End = Pos;
    while (End < Text.size() && Text[End] != ',' && Text[End] != '<')
      ++End;
    E.Name = Text.slice(Pos, End);
    if (E.Name.empty())
      return errorAt(Pos, "expected a pass name");
    if (End < Text.size() && Text[End] == '<') {
      size_t Close = Text.find('>', End);
      if (Close == StringRef::npos)
        return errorAt(End, "expected '>' to close the options of '" +
                                E.Name + "'");
      E.HasParams = true;
      E.Params = Text.slice(End + 1, Close);
      E.ParamsColumn = End + 1;
      End = Close + 1;
    }
    Out.push_back(E);
    if (End == Text.size())
      return Out;
    if (Text[End] != ',')
      return errorAt(End, "expected ',' after '" + E.Name + "'");
    Pos = End + 1;
  }
}

Expected<PassParams> parseParams(const PassInfo &Info, const Element &E) {
  PassParams P;
  SmallVector<StringRef, 4> Known;
  Info.Params.split(Known, ';', -1, false);
  for (StringRef K : Known)
    P[K.str()] = false;
  if (!E.HasParams)
    return P;
  if (Known.empty())
    return errorAt(E.ParamsColumn - 1,
                   "pass '" + E.Name + "' takes no options");
  size_t Pos = 0;
  for (StringRef Opt : split(E.Params, ';')) {
    size_t Column = E.ParamsColumn + Pos;
    Pos += Opt.size() + 1;
    bool Value = !Opt.consume_front("no-");
    if (!is_contained(Known, Opt))
      return errorAt(Column, "unknown option '" + Opt + "' of pass '" +
                                 E.Name + "' (expected: " +
                                 join(Known, ", ") + ")");
    P[Opt.str()] = Value;
  }
  return P;
}

} // namespace

Expected<PassPipeline> PassPipeline::parse(StringRef Text) {
  PassPipeline PP;
  if (Text.empty())
    return PP;
  Expected<std::vector<Element>> Elements = splitPipeline(Text);
  if (!Elements)
    return Elements.takeError();
  // The first structural pass, for the rule that filters come first.
  const Element *FirstStructural = nullptr;
  for (const Element &E : *Elements) {
    if (const PipelineInfo *PI = find_if(
            Pipelines, [&](const PipelineInfo &I) { return I.Name == E.Name; });
        PI != std::end(Pipelines)) {
      if (E.HasParams)
        return errorAt(E.ParamsColumn - 1,
                       "pipeline '" + E.Name + "' takes no options");
      Expected<PassPipeline> Sub = parse(PI->Expansion);
      if (!Sub)
        return errorAt(E.Column, "in the expansion of '" + E.Name +
                                     "': " + toString(Sub.takeError()));
      for (Stage &P : Sub->Passes) {
        if ((P.Multi || !P.Single->isFilter()) && !FirstStructural)
          FirstStructural = &E;
        PP.Passes.push_back(std::move(P));
      }
      continue;
    }
    if (const MultiSetPassInfo *MI =
            find_if(MultiSetRegistry,
                    [&](const MultiSetPassInfo &I) { return I.Name == E.Name; });
        MI != std::end(MultiSetRegistry)) {
      SmallVector<StringRef, 4> Values;
      MI->Params.split(Values, '|', -1, false);
      if (E.HasParams && !is_contained(Values, E.Params))
        return errorAt(E.ParamsColumn, "unknown policy '" + E.Params +
                                           "' of pass '" + E.Name +
                                           "' (expected: " +
                                           join(Values, ", ") + ")");
      if (!FirstStructural)
        FirstStructural = &E;
      PP.Passes.push_back(
          {nullptr, MI->Create(E.HasParams ? E.Params : StringRef())});
      continue;
    }
    const PassInfo *Info = find_if(
        Registry, [&](const PassInfo &I) { return I.Name == E.Name; });
    if (Info == std::end(Registry))
      return errorAt(E.Column, "unknown pass name '" + E.Name + "'");
    Expected<PassParams> Params = parseParams(*Info, E);
    if (!Params)
      return Params.takeError();
    std::unique_ptr<Pass> P = Info->Create(*Params);
    if (P->isFilter() && FirstStructural)
      return errorAt(E.Column,
                     "filter '" + E.Name +
                         "' must come before the structural passes (torch "
                         "filters unoptimized guards); '" +
                         FirstStructural->Name + "' is at column " +
                         Twine(FirstStructural->Column + 1));
    if (!P->isFilter() && !FirstStructural)
      FirstStructural = &E;
    PP.Passes.push_back({std::move(P), nullptr});
  }
  return PP;
}

bool PassPipeline::hasMultiSetPass() const {
  return any_of(Passes, [](const Stage &S) { return S.Multi != nullptr; });
}

std::string PassPipeline::firstMultiSetPass() const {
  for (const Stage &S : Passes)
    if (S.Multi)
      return S.Multi->name().str();
  return "";
}

std::string PassPipeline::str() const {
  std::string S;
  raw_string_ostream OS(S);
  ListSeparator LS(",");
  for (const Stage &P : Passes) {
    OS << LS;
    if (P.Multi)
      P.Multi->printPipeline(OS);
    else
      P.Single->printPipeline(OS);
  }
  return S;
}

namespace {

/// Runs one single-set pass over `S` with its statistics and hooks.
Error runOne(Pass &P, GuardSet &S, const PassContext &Ctx,
             std::vector<PassRunStats> *Stats,
             const PipelineInstrumentation &Instr) {
  std::vector<size_t> Before = S.countByKind();
  size_t ValuesBefore = S.values().size();
  auto Start = std::chrono::steady_clock::now();
  P.run(S, Ctx);
  auto End = std::chrono::steady_clock::now();
  if (Stats) {
    PassRunStats R;
    R.Pass = P.name().str();
    std::vector<size_t> After = S.countByKind();
    for (size_t K = 0; K < Before.size(); ++K)
      R.GuardsRemoved.push_back(int64_t(Before[K]) - int64_t(After[K]));
    R.ValuesRemoved = int64_t(ValuesBefore) - int64_t(S.values().size());
    R.Micros = std::chrono::duration<double, std::micro>(End - Start).count();
    Stats->push_back(std::move(R));
  }
  if (Instr.VerifyEach)
    if (Error E = verifyGuardSet(S))
      return createStringError(inconvertibleErrorCode(),
                               "pass '%s' produced invalid IR: %s",
                               P.name().str().c_str(),
                               toString(std::move(E)).c_str());
  if (Instr.AfterPass)
    Instr.AfterPass(P.name(), S);
  return Error::success();
}

} // namespace

Error PassPipeline::run(GuardSet &S, const PassContext &Ctx,
                        std::vector<PassRunStats> *Stats,
                        const PipelineInstrumentation &Instr) const {
  if (hasMultiSetPass())
    return createStringError(
        inconvertibleErrorCode(),
        "pass '%s' runs over the compile units of a code object, not over "
        "one guard set",
        firstMultiSetPass().c_str());
  for (const Stage &P : Passes)
    if (Error E = runOne(*P.Single, S, Ctx, Stats, Instr))
      return E;
  return Error::success();
}

Error PassPipeline::runUnits(std::vector<std::optional<GuardSet>> &Units,
                             const PassContext &Ctx,
                             std::vector<std::vector<PassRunStats>> *Stats,
                             const PipelineInstrumentation &Instr) const {
  if (Stats)
    Stats->resize(Units.size());
  for (const Stage &P : Passes) {
    if (P.Single) {
      for (size_t I = 0; I < Units.size(); ++I)
        if (Units[I])
          if (Error E = runOne(*P.Single, *Units[I], Ctx,
                               Stats ? &(*Stats)[I] : nullptr, Instr))
            return E;
      continue;
    }
    std::vector<std::vector<size_t>> Before;
    std::vector<size_t> ValuesBefore;
    for (const std::optional<GuardSet> &U : Units) {
      Before.push_back(U ? U->countByKind() : std::vector<size_t>());
      ValuesBefore.push_back(U ? U->values().size() : 0);
    }
    std::vector<PassCounters> Counters;
    auto Start = std::chrono::steady_clock::now();
    P.Multi->run(Units, Ctx, &Counters);
    auto End = std::chrono::steady_clock::now();
    double Micros =
        std::chrono::duration<double, std::micro>(End - Start).count();
    for (size_t I = 0; I < Units.size(); ++I) {
      if (!Units[I])
        continue;
      if (Stats) {
        PassRunStats R;
        R.Pass = P.Multi->name().str();
        std::vector<size_t> After = Units[I]->countByKind();
        for (size_t K = 0; K < After.size(); ++K)
          R.GuardsRemoved.push_back(int64_t(Before[I][K]) - int64_t(After[K]));
        R.ValuesRemoved =
            int64_t(ValuesBefore[I]) - int64_t(Units[I]->values().size());
        R.Micros = Micros;
        if (I < Counters.size())
          R.Counters = std::move(Counters[I]);
        (*Stats)[I].push_back(std::move(R));
      }
      if (Instr.VerifyEach)
        if (Error E = verifyGuardSet(*Units[I]))
          return createStringError(inconvertibleErrorCode(),
                                   "pass '%s' produced invalid IR: %s",
                                   P.Multi->name().str().c_str(),
                                   toString(std::move(E)).c_str());
      if (Instr.AfterPass)
        Instr.AfterPass(P.Multi->name(), *Units[I]);
    }
  }
  return Error::success();
}

void guardjit::printPassNames(raw_ostream &OS) {
  OS << "Passes:\n";
  for (const PassInfo &I : Registry) {
    std::string Name = I.Name.str();
    if (!I.Params.empty())
      Name += "<" + I.Params.str() + ">";
    OS << "  " << left_justify(Name, 42) << " " << I.Description << '\n';
  }
  OS << "Multi-set passes (over the units of a code_object):\n";
  for (const MultiSetPassInfo &I : MultiSetRegistry)
    OS << "  " << left_justify((I.Name + "<" + I.Params + ">").str(), 42)
       << " " << I.Description << '\n';
  OS << "Pipelines:\n";
  for (const PipelineInfo &I : Pipelines)
    OS << "  " << left_justify(I.Name, 42) << " " << I.Description << " ("
       << I.Expansion << ")\n";
}

bool guardjit::RegisteredPass::isTorchFilter() const {
  return EntryKind != Kind::Pipeline && StringRef(Name).ends_with("_unsafe");
}

std::vector<RegisteredPass> guardjit::registeredPasses() {
  std::vector<RegisteredPass> Out;
  for (const PassInfo &I : Registry)
    Out.push_back({I.Params.empty() ? RegisteredPass::Kind::Pass
                                    : RegisteredPass::Kind::PassWithParams,
                   I.Name.str(), I.Params.str(), I.Description.str()});
  for (const MultiSetPassInfo &I : MultiSetRegistry)
    Out.push_back({RegisteredPass::Kind::MultiSetPass, I.Name.str(),
                   I.Params.str(), I.Description.str()});
  for (const PipelineInfo &I : Pipelines)
    Out.push_back({RegisteredPass::Kind::Pipeline, I.Name.str(),
                   I.Expansion.str(), I.Description.str()});
  return Out;
}
