//===- IRCore.cpp - Guard IR bindings -------------------------------------===//
//
// GuardSet (the recorder builds Guard IR through it), BoundGuardSet and
// bind(): the IR and its binding to live objects.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "TensorFields.h"

#include "guardjit/IR/GuardSet.h"
#include "guardjit/IR/Parser.h"
#include "guardjit/IR/Printer.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"
#include "Logging.h"

#include "llvm/Support/Error.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;
using namespace guardjit;

namespace {

ObjectKind parseObjectKind(const std::string &S) {
  static const std::pair<const char *, ObjectKind> Kinds[] = {
      {"type", ObjectKind::Type},         {"object", ObjectKind::Object},
      {"constant", ObjectKind::Constant}, {"callable", ObjectKind::Callable},
      {"dict", ObjectKind::Dict},         {"key", ObjectKind::Key},
      {"state", ObjectKind::State}};
  for (const auto &[Name, Kind] : Kinds)
    if (S == Name)
      return Kind;
  throw py::value_error("unknown object kind '" + S + "'");
}

uint32_t optId(int64_t Id) {
  return Id < 0 ? InvalidId : static_cast<uint32_t>(Id);
}

std::vector<std::optional<int64_t>> toDims(const py::list &L) {
  std::vector<std::optional<int64_t>> Dims;
  for (py::handle H : L) {
    if (H.is_none())
      Dims.push_back(std::nullopt);
    else
      Dims.push_back(py::cast<int64_t>(H));
  }
  return Dims;
}

/// The GuardFilterEntry fields of one Dynamo guard (add_origin, set_origin).
GuardOrigin makeOrigin(const std::string &GuardType, const std::string &Name,
                       const std::vector<std::string> &Derived, bool HasValue,
                       bool IsGlobal, bool ValueIsParameter, bool NNModule,
                       bool BuiltinNNModule) {
  GuardOrigin O;
  O.GuardType = GuardType;
  O.Name = Name;
  O.DerivedGuardTypes = Derived;
  O.HasValue = HasValue;
  O.IsGlobal = IsGlobal;
  O.ValueIsParameter = ValueIsParameter;
  O.UnspecializedNNModule = NNModule;
  O.UnspecializedBuiltinNNModule = BuiltinNNModule;
  return O;
}

} // namespace

void guardjit::python::populateIRCore(py::module_ &M) {
  py::class_<GuardSet, std::shared_ptr<GuardSet>>(M, "GuardSet",
                                                  "Guard IR of one compile unit.")
      .def(py::init<std::string>(), py::arg("name") = "unit")
      .def_property("name", &GuardSet::name, &GuardSet::setName)
      .def(
          "add_object",
          [](GuardSet &S, const std::string &Kind, py::handle Obj, bool Strong,
             const std::string &Repr) {
            // The address is a borrowed PyObject*; the caller keeps `Obj`
            // alive until the set is bound (bind() takes strong references).
            return S.addObject({::parseObjectKind(Kind), Repr, Strong,
                                reinterpret_cast<uintptr_t>(Obj.ptr())});
          },
          py::arg("kind"), py::arg("obj"), py::arg("strong"), py::arg("repr"),
          "Adds an object table entry for `obj`; returns its id.")
      .def(
          "add_value",
          [](GuardSet &S, const std::string &Kind, uint32_t Parent,
             const std::string &Source, const std::string &Name, int64_t Index,
             int64_t Key, int64_t Origin) {
            auto K = parseAccessorKind(Kind);
            if (!K || *K == AccessorKind::Root)
              throw py::value_error("unknown accessor '" + Kind + "'");
            if (Parent >= S.values().size())
              throw py::value_error("undefined parent value %" +
                                    std::to_string(Parent));
            Value V;
            V.Kind = *K;
            V.Parent = Parent;
            V.Source = Source;
            V.Name = Name;
            V.Index = Index;
            V.Key = optId(Key);
            if (Origin >= static_cast<int64_t>(S.origins().size()))
              throw py::value_error("undefined origin");
            V.Origin = optId(Origin);
            return S.addValue(std::move(V));
          },
          py::arg("kind"), py::arg("parent"), py::arg("source"),
          py::arg("name") = "", py::arg("index") = -1, py::arg("key") = -1,
          py::arg("origin") = -1)
      .def(
          "add_origin",
          [](GuardSet &S, const std::string &GuardType, const std::string &Name,
             const std::vector<std::string> &Derived, bool HasValue,
             bool IsGlobal, bool ValueIsParameter, bool NNModule,
             bool BuiltinNNModule) {
            return S.addOrigin(makeOrigin(GuardType, Name, Derived, HasValue,
                                          IsGlobal, ValueIsParameter, NNModule,
                                          BuiltinNNModule));
          },
          py::arg("guard_type"), py::arg("name"), py::arg("derived") = std::vector<std::string>{},
          py::arg("has_value") = false, py::arg("is_global") = false,
          py::arg("value_is_parameter") = false, py::arg("nn_module") = false,
          py::arg("builtin_nn_module") = false,
          "Adds the GuardFilterEntry fields of one Dynamo guard (torch/_guards.py, "
          "make_guard_filter_entry in torch/_dynamo/guards.py) and returns its id "
          "for add_guard(origin=...).")
      .def(
          "set_origin",
          [](GuardSet &S, uint32_t Id, const std::string &GuardType,
             const std::string &Name, const std::vector<std::string> &Derived,
             bool HasValue, bool IsGlobal, bool ValueIsParameter, bool NNModule,
             bool BuiltinNNModule) {
            if (Id >= S.origins().size())
              throw py::value_error("undefined origin " + std::to_string(Id));
            S.origins()[Id] =
                makeOrigin(GuardType, Name, Derived, HasValue, IsGlobal,
                           ValueIsParameter, NNModule, BuiltinNNModule);
          },
          py::arg("id"), py::arg("guard_type"), py::arg("name"),
          py::arg("derived") = std::vector<std::string>{},
          py::arg("has_value") = false, py::arg("is_global") = false,
          py::arg("value_is_parameter") = false, py::arg("nn_module") = false,
          py::arg("builtin_nn_module") = false,
          "Replaces the fields of origin `id` (the recorder settles them once "
          "the Dynamo guard's create() has returned: create() appends to "
          "Guard.guard_types, which torch's filters see as derived_guard_types).")
      .def(
          "add_tensor_spec",
          [](GuardSet &S, py::handle Tensor, int64_t PyType, uint64_t Keys,
             const py::list &Sizes, const py::list &Strides) {
            TensorFields F;
            if (!readTensorFields(Tensor.ptr(), &F))
              throw py::type_error("TENSOR_MATCH value is not a torch.Tensor");
            TensorSpec T;
            T.PyType = optId(PyType);
            T.DispatchKeys = Keys;
            T.DType = F.DType;
            T.DeviceIndex = F.DeviceIndex;
            T.RequiresGrad = F.RequiresGrad;
            T.Sizes = toDims(Sizes);
            T.Strides = toDims(Strides);
            return S.addTensorSpec(std::move(T));
          },
          py::arg("tensor"), py::arg("pytype"), py::arg("dispatch_keys"),
          py::arg("sizes"), py::arg("strides"),
          "Adds TENSOR_MATCH parameters read from the example tensor the way "
          "torch's TensorCheck constructor reads them. `dispatch_keys` is "
          "LocalState.apply(keys).raw_repr() at compile time.")
      .def(
          "add_guard",
          [](GuardSet &S, const std::string &Kind,
             const std::vector<uint32_t> &Operands, int64_t Object, int64_t Aux,
             int64_t Int, const std::vector<int64_t> &Ints,
             const std::string &Str, int64_t Tensor,
             const std::string &Source, int64_t Origin,
             const std::string &File, uint32_t Line,
             const std::string &Verbose, const std::string &Expr) {
            auto K = parseGuardKind(Kind);
            if (!K)
              throw py::value_error("unknown guard kind '" + Kind + "'");
            for (uint32_t Op : Operands)
              if (Op >= S.values().size())
                throw py::value_error("undefined operand %" +
                                      std::to_string(Op));
            if (Object >= static_cast<int64_t>(S.objects().size()) ||
                Aux >= static_cast<int64_t>(S.objects().size()))
              throw py::value_error("undefined object");
            if (Tensor >= static_cast<int64_t>(S.tensorSpecs().size()))
              throw py::value_error("undefined tensor spec");
            if (Origin >= static_cast<int64_t>(S.origins().size()))
              throw py::value_error("undefined origin");
            Guard G;
            G.Kind = *K;
            G.Operands = Operands;
            G.Object = optId(Object);
            G.Aux = optId(Aux);
            G.Int = Int;
            G.Ints = Ints;
            G.Str = Str;
            G.Tensor = optId(Tensor);
            G.Attrs.Source = Source;
            G.Origin = optId(Origin);
            G.Attrs.Loc = {File, Line};
            G.Attrs.VerboseCode = Verbose;
            if (!Expr.empty()) {
              // A shape expression in its .gir spelling, type-checked here so
              // that the caller learns of a bad translation at once.
              llvm::Expected<ShapeExpr> E = parseShapeExprString(Expr);
              if (!E)
                throw py::value_error(llvm::toString(E.takeError()));
              std::vector<ShapeType> Types;
              std::string Msg =
                  inferShapeExprTypes(*E, G.Operands.size(), Types);
              if (!Msg.empty())
                throw py::value_error("shape expression '" + Expr +
                                      "': " + Msg);
              G.Expr = std::move(*E);
            }
            S.addGuard(std::move(G));
          },
          py::arg("kind"), py::arg("operands"), py::arg("object") = -1,
          py::arg("aux") = -1, py::arg("int") = 0,
          py::arg("ints") = std::vector<int64_t>(), py::arg("str") = "",
          py::arg("tensor") = -1, py::arg("source") = "",
          py::arg("origin") = -1, py::arg("file") = "", py::arg("line") = 0,
          py::arg("verbose") = "", py::arg("expr") = "")
      .def_property_readonly("num_guards",
                             [](const GuardSet &S) { return S.guards().size(); })
      .def_property_readonly("num_values",
                             [](const GuardSet &S) { return S.values().size(); })
      .def(
          "count_by_kind",
          [](const GuardSet &S) {
            py::dict D;
            auto Counts = S.countByKind();
            // Summed: two kinds can mirror one torch guard (LENGTH_CHECK of
            // each release).
            for (size_t I = 0; I < Counts.size(); ++I)
              if (Counts[I]) {
                py::str Name(std::string(torchName(static_cast<GuardKind>(I))));
                D[Name] = py::cast<size_t>(D.attr("get")(Name, 0)) + Counts[I];
              }
            return D;
          },
          "Guards per Dynamo guard kind, e.g. {'TENSOR_MATCH': 9}.")
      .def(
          "guard_sources",
          [](const GuardSet &S) {
            std::vector<std::pair<std::string, std::string>> Out;
            Out.reserve(S.guards().size());
            for (const Guard &G : S.guards())
              Out.emplace_back(std::string(torchName(G.Kind)), G.Attrs.Source);
            return Out;
          },
          "(Dynamo guard kind, Dynamo source) of each guard, in order; the "
          "source is \"\" for a guard without one (GLOBAL_STATE).")
      .def("print", &printGuardSet, "The .gir text of the set.")
      .def(
          "copy",
          [](const GuardSet &S) { return std::make_shared<GuardSet>(S); },
          "An independent copy (same object addresses), e.g. to keep the set "
          "as recorded before run_pipeline changes it.")
      .def(
          "object_addresses",
          [](const GuardSet &S) {
            std::vector<uintptr_t> A;
            A.reserve(S.objects().size());
            for (const ObjectEntry &E : S.objects())
              A.push_back(E.Address);
            return A;
          },
          "The address (a PyObject*, never dereferenced here; 0 for parsed IR) "
          "of each object table entry, in table order. With print(), which "
          "holds every other field, it identifies a set exactly (the plugin "
          "reuses a differentiating root while its set is unchanged).");

  py::class_<BoundGuardSet, std::shared_ptr<BoundGuardSet>>(
      M, "BoundGuardSet", "A guard set bound to live objects.")
      .def(
          "interpret",
          [](const BoundGuardSet &B, py::dict FrameLocals) {
            return interpret(B, FrameLocals.ptr());
          },
          py::arg("f_locals"),
          "Runs the reference interpreter over the frame locals dict.")
      .def(
          "explain",
          [](const BoundGuardSet &B, py::dict FrameLocals) {
            return explainFailure(B, FrameLocals.ptr());
          },
          py::arg("f_locals"),
          "Where the interpreter fails on the frame locals: the first failing "
          "guard (\"guard #3 (TENSOR_MATCH on L['x'])\"), or a value whose "
          "read fails; \"\" when the set passes.");

  M.def(
      "bind",
      [](std::shared_ptr<GuardSet> S) {
        std::string Error;
        std::unique_ptr<BoundGuardSet> B = BoundGuardSet::bind(S, &Error);
        if (!B) {
          logMessage(LogLevel::Warning,
                     "guard set " + S->name() + ": cannot bind: " + Error);
          throw py::value_error("guardjit: cannot bind guard set '" + S->name() +
                                "': " + Error);
        }
        return std::shared_ptr<BoundGuardSet>(std::move(B));
      },
      py::arg("guard_set"),
      "Binds a guard set to the objects whose addresses it holds. Strong "
      "entries are kept alive by the result.");
}
