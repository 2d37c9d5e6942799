//===- BoundGuardSet.cpp - A guard set bound to live objects --------------===//
//
// bind() is the one place that validates a GuardSet against the live objects
// it references, so the interpreter and the JIT can read the IR without
// checks on the hot path: every object entry is bound, every operand and key
// the evaluator dereferences exists and has the shape its helper expects, and
// every torch guard has a prepared payload.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/BoundGuardSet.h"

#include "DimensionMarking.h"
#include "guardjit/Runtime/TorchHooks.h"

#include <algorithm>
#include <cassert>
#include <string>

using namespace guardjit;

std::string guardjit::describeGuard(const GuardSet &S, size_t Index) {
  const Guard &G = S.guards()[Index];
  std::string Source = G.Attrs.Source;
  if (Source.empty() && !G.Operands.empty() &&
      G.Operands.front() < S.values().size())
    Source = S.value(G.Operands.front()).Source;
  std::string D = "guard #" + std::to_string(Index) + " (" +
                  std::string(torchName(G.Kind));
  if (!Source.empty())
    D += " on " + Source;
  return D + ")";
}

std::string guardjit::describeValue(const GuardSet &S, ValueId Id) {
  const Value &V = S.value(Id);
  std::string D = "value #" + std::to_string(Id) + " (" +
                  std::string(spelling(V.Kind));
  if (!V.Source.empty())
    D += " " + V.Source;
  return D + ")";
}

uint32_t guardjit::layoutMemos(const GuardSet &S,
                               std::vector<uint32_t> *ValueMemo,
                               std::vector<uint32_t> *GuardMemo) {
  const auto &Guards = S.guards();
  ValueMemo->assign(S.values().size(), NoMemoSlot);
  GuardMemo->assign(Guards.size(), NoMemoSlot);
  std::vector<std::vector<uint32_t>> GuardsAfter(S.values().size());
  for (size_t I = 0; I < Guards.size(); ++I)
    if (guardUsesDictCache(Guards[I].Kind) && !Guards[I].Operands.empty())
      GuardsAfter[*std::max_element(Guards[I].Operands.begin(),
                                    Guards[I].Operands.end())]
          .push_back(static_cast<uint32_t>(I));
  uint32_t NumMemos = 0;
  for (ValueId V = 0; V < S.values().size(); ++V) {
    if (accessorHasReadDescriptor(S.value(V).Kind))
      (*ValueMemo)[V] = NumMemos++;
    for (uint32_t G : GuardsAfter[V])
      (*GuardMemo)[G] = NumMemos++;
  }
  return NumMemos;
}

namespace {

/// Names a user of object `Id` so an unbound entry can be traced to a source.
std::string describeObjectUser(const GuardSet &S, ObjectId Id) {
  for (size_t I = 0; I < S.guards().size(); ++I) {
    const Guard &G = S.guards()[I];
    if (G.Object == Id || G.Aux == Id)
      return describeGuard(S, I);
    if (G.Kind == GuardKind::TensorMatch && G.Tensor < S.tensorSpecs().size() &&
        S.tensorSpec(G.Tensor).PyType == Id)
      return describeGuard(S, I);
  }
  for (ValueId V = 0; V < S.values().size(); ++V)
    if (S.value(V).Key == Id)
      return describeValue(S, V);
  return "no guard";
}

} // namespace

BoundGuardSet::BoundGuardSet(std::shared_ptr<const GuardSet> Set)
    : Set(std::move(Set)) {}

BoundGuardSet::~BoundGuardSet() {
  const TorchHooks *Hooks = torchHooks();
  const std::vector<Guard> &Guards = Set->guards();
  for (size_t I = Payloads.size(); I-- > 0;) {
    if (!Payloads[I])
      continue;
    if (Guards[I].Kind == GuardKind::DimensionMarking)
      releaseDimensionMarking(
          static_cast<DimensionMarkingSlot *>(Payloads[I])->Spec);
    else if (Hooks && Hooks->release)
      Hooks->release(Guards[I], Payloads[I]);
  }
  // Objects is either empty (bind failed before taking references) or holds
  // a reference for every strong entry.
  for (size_t I = 0; I < Objects.size(); ++I)
    if (Set->object(static_cast<ObjectId>(I)).Strong)
      Py_DECREF(Objects[I]);
}

std::unique_ptr<BoundGuardSet>
BoundGuardSet::bind(std::shared_ptr<const GuardSet> SetPtr,
                    std::string *Error) {
  auto Fail = [&](std::string Msg) -> std::unique_ptr<BoundGuardSet> {
    if (Error)
      *Error = std::move(Msg);
    return nullptr;
  };
  if (!SetPtr)
    return Fail("no guard set to bind");
  const GuardSet &S = *SetPtr;
  const size_t NumObjects = S.objects().size();
  auto objectOk = [&](ObjectId Id) { return Id < NumObjects; };

  // 1. Every object entry must be bound before any reference is taken.
  for (ObjectId I = 0; I < NumObjects; ++I)
    if (S.object(I).Address == 0)
      return Fail("object #" + std::to_string(I) + " (" + S.object(I).Repr +
                  ") is unbound; used by " + describeObjectUser(S, I));
  auto obj = [&](ObjectId Id) {
    return reinterpret_cast<PyObject *>(S.object(Id).Address);
  };

  // 2. Values: parents precede children; keys exist and have the right type.
  if (S.values().empty() || S.value(0).Kind != AccessorKind::Root)
    return Fail("value #0 must be the root");
  for (ValueId V = 1; V < S.values().size(); ++V) {
    const Value &Val = S.value(V);
    if (Val.Kind == AccessorKind::Root)
      return Fail(describeValue(S, V) + ": only value #0 may be the root");
    if (Val.Parent >= V)
      return Fail(describeValue(S, V) + ": parent must precede the value");
    if (Val.Kind == AccessorKind::Recorded &&
        (Val.Index < 0 || Val.Parent != GuardSet::root()))
      return Fail(describeValue(S, V) +
                  ": recorded needs the root as parent and an index >= 0");
    if (Val.Kind == AccessorKind::ContextVarGet && Val.Key != InvalidId &&
        !objectOk(Val.Key))
      return Fail(describeValue(S, V) + ": missing default object");
    if (!accessorReadsKey(Val.Kind))
      continue;
    if (!objectOk(Val.Key))
      return Fail(describeValue(S, V) + ": missing key object");
    PyObject *Key = obj(Val.Key);
    if ((Val.Kind == AccessorKind::GetAttr ||
         Val.Kind == AccessorKind::GenericGetAttr) &&
        !PyUnicode_Check(Key))
      return Fail(describeValue(S, V) + ": attribute name must be a str");
    if (Val.Kind == AccessorKind::Globals && !PyDict_Check(Key))
      return Fail(describeValue(S, V) + ": globals key must be a dict");
    if (Val.Kind == AccessorKind::Lambda && !PyCallable_Check(Key))
      return Fail(describeValue(S, V) + ": key must be callable");
  }

  // 3. Guards: operands, objects and tensor specs the evaluators read.
  const std::vector<Guard> &Guards = S.guards();
  for (size_t I = 0; I < Guards.size(); ++I) {
    const Guard &G = Guards[I];
    int NumOps = guardArity(G.Kind);
    if (NumOps >= 0 && G.Operands.size() != static_cast<size_t>(NumOps))
      return Fail(describeGuard(S, I) + ": expected " + std::to_string(NumOps) +
                  " operand(s), got " + std::to_string(G.Operands.size()));
    for (ValueId Op : G.Operands)
      if (Op >= S.values().size())
        return Fail(describeGuard(S, I) + ": operand #" + std::to_string(Op) +
                    " is not a value");
    if (guardReadsObject(G.Kind) && !objectOk(G.Object))
      return Fail(describeGuard(S, I) + ": missing object");
    switch (G.Kind) {
    case GuardKind::TypeMatch:
      if (!PyType_Check(obj(G.Object)))
        return Fail(describeGuard(S, I) + ": object must be a type");
      break;
    case GuardKind::NoHasAttr:
      if (!PyUnicode_Check(obj(G.Object)))
        return Fail(describeGuard(S, I) + ": attribute name must be a str");
      break;
    case GuardKind::Lambda:
    case GuardKind::EpilogueLambda:
      if (!PyCallable_Check(obj(G.Object)))
        return Fail(describeGuard(S, I) + ": object must be callable");
      break;
    case GuardKind::ShapeExpr: {
      // The evaluators trust the expression: check it as the verifier does.
      std::vector<ShapeType> Types;
      std::string Msg =
          inferShapeExprTypes(G.Expr, G.Operands.size(), Types);
      if (!Msg.empty())
        return Fail(describeGuard(S, I) + ": " + Msg);
      if (G.Object != InvalidId &&
          (!objectOk(G.Object) || !PyCallable_Check(obj(G.Object))))
        return Fail(describeGuard(S, I) + ": fallback must be callable");
      break;
    }
    case GuardKind::DefaultDevice:
      if (!objectOk(G.Aux) || !PyDict_Check(obj(G.Aux)))
        return Fail(describeGuard(S, I) +
                    ": aux must be the torch.utils._device module dict");
      break;
    case GuardKind::TupleIteratorLen:
      // The helper reads the tuple_iterator layout after the type test.
      if (obj(G.Object) != reinterpret_cast<PyObject *>(&PyTupleIter_Type))
        return Fail(describeGuard(S, I) + ": object must be tuple_iterator");
      break;
    case GuardKind::RangeIteratorMatch:
      if (obj(G.Object) != reinterpret_cast<PyObject *>(&PyRangeIter_Type))
        return Fail(describeGuard(S, I) + ": object must be range_iterator");
      if (G.Ints.size() != 3)
        return Fail(describeGuard(S, I) + ": needs ints=[start, stop, step]");
      break;
    case GuardKind::SavedTensorsHooks:
      if (!PyType_Check(obj(G.Object)))
        return Fail(describeGuard(S, I) +
                    ": object must be the torch.fx.GraphModule class");
      if ((G.Int != 0 && G.Int != 1) || G.Ints.size() != (G.Int ? 2u : 0u))
        return Fail(describeGuard(S, I) +
                    ": needs int=0, or int=1 and ints=[pack id, unpack id]");
      break;
    case GuardKind::FakeScriptTypeMatch:
      if (!objectOk(G.Aux) || !PyType_Check(obj(G.Aux)))
        return Fail(describeGuard(S, I) +
                    ": aux must be the FakeScriptObject class");
      break;
    case GuardKind::DispatchKeySetMatch:
      if (!PyType_Check(obj(G.Object)))
        return Fail(describeGuard(S, I) +
                    ": object must be the DispatchKeySet type");
      break;
    case GuardKind::CowTensorMatch:
      if (G.Int != 0 && G.Int != 1)
        return Fail(describeGuard(S, I) + ": needs int=0 or int=1");
      break;
    case GuardKind::StorageOverlapping:
      if (G.Int < 0 || static_cast<uint64_t>(G.Int) > G.Operands.size())
        return Fail(describeGuard(S, I) +
                    ": int must count the overlapping operands");
      break;
    case GuardKind::TensorMatch:
      if (G.Tensor >= S.tensorSpecs().size())
        return Fail(describeGuard(S, I) + ": missing tensor spec");
      if (!objectOk(S.tensorSpec(G.Tensor).PyType) ||
          !PyType_Check(obj(S.tensorSpec(G.Tensor).PyType)))
        return Fail(describeGuard(S, I) + ": tensor spec needs a type object");
      break;
    default:
      break;
    }
  }

  // 4. Take the strong references. From here on the destructor undoes
  // everything bind has done, so failures can simply return.
  std::unique_ptr<BoundGuardSet> B(new BoundGuardSet(SetPtr));
  B->Objects.resize(NumObjects);
  for (ObjectId I = 0; I < NumObjects; ++I) {
    B->Objects[I] = obj(I);
    if (S.object(I).Strong)
      Py_INCREF(B->Objects[I]);
  }

  // 5. Lookup memos, all empty, in visiting order (layoutMemos).
  uint32_t NumMemos = layoutMemos(S, &B->ValueMemo, &B->GuardMemo);
  B->NumMemos = NumMemos;
  B->Memos = std::make_unique<ReadDescriptor[]>(NumMemos);
  // Their descriptors (ReadDescriptor): the read's operands, the checks of
  // the guards fused into it. From the IR and the objects only, so that
  // code cached by another process reads the same thing.
  for (ValueId V = 0; V < S.values().size(); ++V) {
    if (B->ValueMemo[V] == NoMemo)
      continue;
    const Value &Val = S.value(V);
    ReadDescriptor &D = B->Memos[B->ValueMemo[V]];
    if (accessorReadsKey(Val.Kind))
      D.Key = B->Objects[Val.Key];
    D.Int = Val.Index;
    D.Accessor = static_cast<int64_t>(Val.Kind);
  }
  std::vector<bool> Fused = fusedReadGuards(S);
  std::vector<uint32_t> Paths = readPaths(S, Fused);
  for (ValueId V = 0; V < S.values().size(); ++V)
    if (Paths[V] >= 2)
      B->Memos[B->ValueMemo[V]].Path = Paths[V];
  for (size_t I = 0; I < Guards.size(); ++I) {
    const Guard &G = Guards[I];
    if (B->GuardMemo[I] != NoMemo) {
      ReadDescriptor &D = B->Memos[B->GuardMemo[I]];
      D.Key = B->Objects[G.Object];
      D.Int = G.Int != 0;
    }
    if (!Fused[I])
      continue;
    ReadDescriptor &D = B->Memos[B->ValueMemo[G.Operands.front()]];
    switch (G.Kind) {
    case GuardKind::TypeMatch:
      D.Type = B->Objects[G.Object];
      break;
    case GuardKind::IdMatch:
      D.Is = B->Objects[G.Object];
      break;
    case GuardKind::NoneMatch:
      D.Is = Py_None;
      break;
    case GuardKind::TrueMatch:
      D.Is = Py_True;
      break;
    case GuardKind::FalseMatch:
      D.Is = Py_False;
      break;
    case GuardKind::NotNone:
      D.IsNot = Py_None;
      break;
    case GuardKind::EqualsMatch:
      D.Equals = B->Objects[G.Object];
      break;
    default:
      assert(false && "fusedReadGuards fuses no other kind");
    }
  }

  // Recorded-object slots (subtree skipping's residual sets), all null.
  size_t NumRecorded = 0;
  for (const Value &Val : S.values())
    if (Val.Kind == AccessorKind::Recorded)
      NumRecorded = std::max(NumRecorded, static_cast<size_t>(Val.Index) + 1);
  B->RecordedSlots.assign(NumRecorded, nullptr);

  // 6. Payloads. Identical unmarked DIMENSION_DYNAMIC_MARKING specs (one
  // per tensor, nearly all the same) share one payload: a cold check then
  // reads one payload for all of them instead of one per tensor.
  B->Payloads.assign(Guards.size(), nullptr);
  const TorchHooks *Hooks = torchHooks();
  std::vector<DimensionMarkingPayload *> Unmarked;
  size_t NumMarking = std::count_if(Guards.begin(), Guards.end(),
                                    [](const Guard &G) {
                                      return G.Kind ==
                                             GuardKind::DimensionMarking;
                                    });
  B->MarkingSlots = std::make_unique<DimensionMarkingSlot[]>(NumMarking);
  size_t NextSlot = 0;
  for (size_t I = 0; I < Guards.size(); ++I) {
    const Guard &G = Guards[I];
    if (guardNeedsLocalState(G.Kind))
      B->NeedsLocalState = true;
    std::string Err;
    if (G.Kind == GuardKind::DimensionMarking) {
      DimensionMarkingPayload *P =
          prepareDimensionMarking(B->Objects[G.Object], &Err);
      if (!P)
        return Fail(describeGuard(S, I) + ": " + Err);
      for (DimensionMarkingPayload *Q : Unmarked)
        if (sameUnmarkedSpec(*P, *Q)) {
          releaseDimensionMarking(P);
          ++Q->Refs;
          P = Q;
          break;
        }
      if (P->Refs == 1 && P->ExpectedAttrs.empty() &&
          P->DependentAttrs.empty() && Unmarked.size() < 8)
        Unmarked.push_back(P);
      DimensionMarkingSlot &Slot = B->MarkingSlots[NextSlot++];
      Slot.Spec = P;
      B->Payloads[I] = &Slot;
      continue;
    }
    if (!hasTorchPayload(G.Kind))
      continue;
    if (!Hooks || !Hooks->prepare)
      return Fail(describeGuard(S, I) +
                  ": no TorchHooks installed (call installTorchRuntime() "
                  "after importing torch)");
    B->Payloads[I] = Hooks->prepare(S, G, B->Objects.data(), &Err);
    if (!B->Payloads[I])
      return Fail(describeGuard(S, I) + ": " +
                  (Err.empty() ? std::string("cannot prepare payload") : Err));
  }
  return B;
}
