//===- LowerShapeExpr.cpp - SHAPE_ENV expressions -------------------------===//
//
// shape_expr guards: Dynamo's SHAPE_ENV epilogue translated to an expression
// tree over int and float reads (lib/Runtime/ShapeEval.cpp is the reference),
// computed inline with Python's semantics; overflow or an inexact conversion
// goes to the guard's Python fallback.
//
//===----------------------------------------------------------------------===//
#include "Lowerer.h"

#include "guardjit/Runtime/RuntimeHelpers.h"
#include "guardjit/Runtime/ShapeEval.h"

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"

#include <limits>
#include <tuple>

using namespace llvm;

namespace guardjit {

/// A SHAPE_ENV expression (lib/Runtime/ShapeEval.cpp is the reference):
/// every operand is read first (a non-exact read is "unknown"), then the
/// nodes are computed in Python's order. A ZeroDivisionError branches to the
/// failure target; an overflow or inexact conversion to the "unknown" block,
/// which calls the Python fallback (or fails without one).
void Lowerer::emitShapeGuard(size_t Index) {
  const Guard &G = S.guards()[Index];
  std::string P = prefix('g', Index);
  std::vector<ShapeType> Types;
  std::string Msg = inferShapeExprTypes(G.Expr, G.Operands.size(), Types);
  assert(Msg.empty() && "validated before lowering");
  (void)Msg;
  // Inserted once their predecessors exist: the hot path reads in order.
  BasicBlock *Unknown = BasicBlock::Create(Ctx, P + ".unknown");
  BasicBlock *Cont = BasicBlock::Create(Ctx, P + ".done");

  // 1. Operand reads, each into an entry-block slot.
  std::vector<llvm::Value *> Reads(G.Operands.size(), nullptr);
  IRBuilder<> EB(&F->getEntryBlock(), F->getEntryBlock().begin());
  for (const ShapeNode &N : G.Expr) {
    if ((N.Op != ShapeOp::ReadInt && N.Op != ShapeOp::ReadFloat) ||
        Reads[N.Int])
      continue;
    bool IsInt = N.Op == ShapeOp::ReadInt;
    Type *Ty = IsInt ? static_cast<Type *>(I64) : B.getDoubleTy();
    std::string Slot = P + ".op" + std::to_string(N.Int);
    llvm::Value *Addr = EB.CreateAlloca(Ty, nullptr, Slot + ".slot");
    llvm::Value *Ok = isTrue(B.CreateCall(
        helper(IsInt ? "gj_rt_shape_read_int" : "gj_rt_shape_read_float", I32,
               {PtrTy, PtrTy}),
        {Vals[G.Operands[N.Int]], Addr}, Slot + ".ok"));
    branchIf(B.CreateNot(Ok), Unknown, Slot + ".read");
    Reads[N.Int] = B.CreateAlignedLoad(Ty, Addr, Align(8), Slot);
  }

  // 2. The expression; its root decides.
  llvm::Value *Root =
      emitShapeNode(G.Expr, G.Expr.size() - 1, Types, Reads, Unknown, P);
  B.CreateCondBr(Root, Cont, FailTarget, Likely);

  // 3. Unknown: Python decides (its answer is Dynamo's), or the guard fails.
  Unknown->insertInto(F);
  B.SetInsertPoint(Unknown);
  if (G.Object != InvalidId) {
    llvm::Value *Pass =
        isTrue(B.CreateCall(helper("gj_rt_lambda", I32, {PtrTy, PtrTy}),
                            {object(G.Object), FrameLocals}, P + ".fallback"));
    B.CreateCondBr(Pass, Cont, FailTarget);
  } else {
    B.CreateBr(FailTarget);
  }
  Cont->insertInto(F);
  B.SetInsertPoint(Cont);
}

llvm::Value *Lowerer::emitShapeNode(const ShapeExpr &E, size_t I,
                                    const std::vector<ShapeType> &Types,
                                    const std::vector<llvm::Value *> &Reads,
                                    BasicBlock *Unknown, const std::string &P) {
  const ShapeNode &N = E[I];
  auto Arg = [&](size_t K) {
    return emitShapeNode(E, N.Args[K], Types, Reads, Unknown, P);
  };
  switch (N.Op) {
  case ShapeOp::ConstInt:
    return ConstantInt::get(I64, N.Int);
  case ShapeOp::ConstFloat:
    return ConstantFP::get(B.getDoubleTy(), N.Float);
  case ShapeOp::ReadInt:
  case ShapeOp::ReadFloat:
    return Reads[N.Int];
  case ShapeOp::And:
  case ShapeOp::Or: {
    // Short-circuit like Python: later arguments run only when needed.
    bool IsAnd = N.Op == ShapeOp::And;
    BasicBlock *Join = BasicBlock::Create(Ctx, P + ".join", F);
    std::vector<std::pair<llvm::Value *, BasicBlock *>> Incoming;
    for (size_t K = 0; K < N.Args.size(); ++K) {
      llvm::Value *X = Arg(K);
      Incoming.emplace_back(X, B.GetInsertBlock());
      if (K + 1 == N.Args.size()) {
        B.CreateBr(Join);
        break;
      }
      BasicBlock *Next = BasicBlock::Create(Ctx, P + ".next", F);
      if (IsAnd)
        B.CreateCondBr(X, Next, Join);
      else
        B.CreateCondBr(X, Join, Next);
      B.SetInsertPoint(Next);
    }
    B.SetInsertPoint(Join);
    PHINode *Phi = B.CreatePHI(B.getInt1Ty(), Incoming.size());
    for (auto &[X, BB] : Incoming)
      Phi->addIncoming(X, BB);
    return Phi;
  }
  case ShapeOp::Min:
  case ShapeOp::Max: {
    // builtins.min/max: replace the running value when x < m (x > m).
    bool IsInt = Types[I] == ShapeType::Int, IsMin = N.Op == ShapeOp::Min;
    llvm::Value *M = Arg(0);
    for (size_t K = 1; K < N.Args.size(); ++K) {
      llvm::Value *X = Arg(K);
      llvm::Value *Replace =
          IsInt ? B.CreateICmp(IsMin ? CmpInst::ICMP_SLT : CmpInst::ICMP_SGT,
                               X, M)
                : B.CreateFCmp(IsMin ? CmpInst::FCMP_OLT : CmpInst::FCMP_OGT,
                               X, M);
      M = B.CreateSelect(Replace, X, M);
    }
    return M;
  }
  default:
    break;
  }
  llvm::Value *A = Arg(0);
  ShapeType TA = Types[N.Args[0]];
  llvm::Value *Bv = nullptr;
  ShapeType TB = ShapeType::Int;
  if (N.Args.size() > 1) {
    Bv = Arg(1);
    TB = Types[N.Args[1]];
  }
  return emitShapeBinary(N.Op, A, TA, Bv, TB, Unknown, P);
}

llvm::Value *Lowerer::emitShapeBinary(ShapeOp Op, llvm::Value *A, ShapeType TA,
                                      llvm::Value *Bv, ShapeType TB,
                                      BasicBlock *Unknown,
                                      const std::string &P) {
  Type *F64 = B.getDoubleTy();
  bool BothInt = TA == ShapeType::Int && TB == ShapeType::Int;
  auto AsF = [&](llvm::Value *X, ShapeType T) {
    return T == ShapeType::Int ? B.CreateSIToFP(X, F64) : X;
  };
  // |X| <= 2^53, i.e. (X + 2^53) <=u 2^54: X converts to double exactly.
  auto ExactOrUnknown = [&](llvm::Value *X) {
    llvm::Value *Biased = B.CreateAdd(X, ConstantInt::get(I64, MaxExactDoubleInt));
    branchIf(B.CreateICmpUGT(Biased,
                             ConstantInt::get(I64, 2 * MaxExactDoubleInt)),
             Unknown, P + ".exact");
  };
  auto Checked = [&](Intrinsic::ID Id, llvm::Value *X, llvm::Value *Y) {
    llvm::Value *R = B.CreateBinaryIntrinsic(Id, X, Y);
    branchIf(B.CreateExtractValue(R, 1), Unknown, P + ".no_overflow");
    return B.CreateExtractValue(R, 0);
  };
  llvm::Value *Zero = ConstantInt::get(I64, 0);
  switch (Op) {
  case ShapeOp::Add:
  case ShapeOp::Sub:
  case ShapeOp::Mul:
    if (BothInt)
      return Checked(Op == ShapeOp::Add   ? Intrinsic::sadd_with_overflow
                     : Op == ShapeOp::Sub ? Intrinsic::ssub_with_overflow
                                          : Intrinsic::smul_with_overflow,
                     A, Bv);
    A = AsF(A, TA);
    Bv = AsF(Bv, TB);
    return Op == ShapeOp::Add   ? B.CreateFAdd(A, Bv)
           : Op == ShapeOp::Sub ? B.CreateFSub(A, Bv)
                                : B.CreateFMul(A, Bv);
  case ShapeOp::FloorDiv:
  case ShapeOp::Mod: {
    // ZeroDivisionError: the guard fails.
    branchIf(B.CreateICmpEQ(Bv, Zero), FailTarget, P + ".nonzero");
    llvm::Value *MinusOne = B.CreateICmpEQ(Bv, ConstantInt::get(I64, -1));
    if (Op == ShapeOp::FloorDiv) {
      llvm::Value *IsMin = B.CreateICmpEQ(
          A, ConstantInt::get(I64, std::numeric_limits<int64_t>::min()));
      branchIf(B.CreateAnd(IsMin, MinusOne), Unknown, P + ".fits");
      llvm::Value *Q = B.CreateSDiv(A, Bv), *R = B.CreateSRem(A, Bv);
      llvm::Value *Adjust =
          B.CreateAnd(B.CreateICmpNE(R, Zero),
                      B.CreateICmpSLT(B.CreateXor(R, Bv), Zero));
      return B.CreateSub(Q, B.CreateZExt(Adjust, I64));
    }
    // x % -1 is 0 in Python but traps as srem INT64_MIN, -1: use 1.
    llvm::Value *Div = B.CreateSelect(MinusOne, ConstantInt::get(I64, 1), Bv);
    llvm::Value *R = B.CreateSRem(A, Div);
    llvm::Value *Adjust = B.CreateAnd(B.CreateICmpNE(R, Zero),
                                      B.CreateICmpSLT(B.CreateXor(R, Bv), Zero));
    return B.CreateSelect(Adjust, B.CreateAdd(R, Bv), R);
  }
  case ShapeOp::TrueDiv:
    if (BothInt) {
      branchIf(B.CreateICmpEQ(Bv, Zero), FailTarget, P + ".nonzero");
      ExactOrUnknown(A);
      ExactOrUnknown(Bv);
    }
    A = AsF(A, TA);
    Bv = AsF(Bv, TB);
    if (!BothInt)
      branchIf(B.CreateFCmpOEQ(Bv, ConstantFP::get(F64, 0.0)), FailTarget,
               P + ".nonzero");
    return B.CreateFDiv(A, Bv);
  case ShapeOp::Neg:
    if (TA == ShapeType::Float)
      return B.CreateFNeg(A);
    return Checked(Intrinsic::ssub_with_overflow, Zero, A);
  case ShapeOp::Abs:
    if (TA == ShapeType::Float)
      return B.CreateUnaryIntrinsic(Intrinsic::fabs, A);
    branchIf(B.CreateICmpEQ(A, ConstantInt::get(
                                   I64, std::numeric_limits<int64_t>::min())),
             Unknown, P + ".abs");
    return B.CreateSelect(B.CreateICmpSLT(A, Zero), B.CreateNeg(A), A);
  case ShapeOp::ToFloat:
    return B.CreateSIToFP(A, F64);
  case ShapeOp::Eq:
  case ShapeOp::Ne:
  case ShapeOp::Lt:
  case ShapeOp::Le:
  case ShapeOp::Gt:
  case ShapeOp::Ge: {
    static constexpr std::tuple<ShapeOp, CmpInst::Predicate, CmpInst::Predicate>
        Preds[] = {
            {ShapeOp::Eq, CmpInst::ICMP_EQ, CmpInst::FCMP_OEQ},
            {ShapeOp::Ne, CmpInst::ICMP_NE, CmpInst::FCMP_UNE},
            {ShapeOp::Lt, CmpInst::ICMP_SLT, CmpInst::FCMP_OLT},
            {ShapeOp::Le, CmpInst::ICMP_SLE, CmpInst::FCMP_OLE},
            {ShapeOp::Gt, CmpInst::ICMP_SGT, CmpInst::FCMP_OGT},
            {ShapeOp::Ge, CmpInst::ICMP_SGE, CmpInst::FCMP_OGE},
        };
    CmpInst::Predicate IP = CmpInst::ICMP_EQ, FP = CmpInst::FCMP_OEQ;
    for (const auto &[O, I, Fl] : Preds)
      if (O == Op)
        IP = I, FP = Fl;
    if (BothInt)
      return B.CreateICmp(IP, A, Bv);
    // Python compares int and float exactly; doubles do up to 2^53.
    if (TA == ShapeType::Int)
      ExactOrUnknown(A);
    if (TB == ShapeType::Int)
      ExactOrUnknown(Bv);
    return B.CreateFCmp(FP, AsF(A, TA), AsF(Bv, TB));
  }
  case ShapeOp::Not:
    return B.CreateNot(A);
  case ShapeOp::IsNan:
    return B.CreateFCmpUNO(A, A);
  default:
    llvm_unreachable("leaves and n-ary operators are emitted by emitShapeNode");
  }
}

} // namespace guardjit
