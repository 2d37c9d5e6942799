//===- OverlapTest.cpp - bytesOverlap over DLTensor views -----------------===//
//
// The host refuses a request where an input the package writes overlaps
// another input (ServeHost::writesDoNotOverlap); the request files of the
// command line cannot carry shared storage (torch::jit::pickle_load gives
// each tensor its own), so the byte ranges are tested here on views made by
// hand, as a C++ host would pass them.
//
//===----------------------------------------------------------------------===//
#include "ServeHost.h"

#include <gtest/gtest.h>

#include <vector>

using guardjit::serve::bytesOverlap;

namespace {

/// A float32 view of `Base` at element offset `Offset`.
struct View {
  std::vector<int64_t> Shape, Strides;
  DLTensor T{};
  View(float *Base, int64_t Offset, std::vector<int64_t> Shape_,
       std::vector<int64_t> Strides_)
      : Shape(std::move(Shape_)), Strides(std::move(Strides_)) {
    T.data = Base;
    T.byte_offset = Offset * sizeof(float);
    T.ndim = static_cast<int32_t>(Shape.size());
    T.shape = Shape.data();
    T.strides = Strides.empty() ? nullptr : Strides.data();
    T.dtype = {kDLFloat, 32, 1};
    T.device = {kDLCPU, 0};
  }
};

TEST(ServeOverlap, RowsOfOneMatrix) {
  std::vector<float> Buf(5 * 16);
  View A(Buf.data(), 0, {4, 16}, {16, 1}), B(Buf.data(), 16, {4, 16}, {16, 1});
  View C(Buf.data(), 64, {1, 16}, {16, 1}), D(Buf.data(), 48, {1, 16}, {});
  EXPECT_TRUE(bytesOverlap(A.T, B.T));  // rows 0-3 and 1-4
  EXPECT_FALSE(bytesOverlap(A.T, C.T)); // rows 0-3 and 4
  EXPECT_TRUE(bytesOverlap(A.T, D.T));  // row 3, compact strides
  EXPECT_TRUE(bytesOverlap(B.T, C.T));
  EXPECT_TRUE(bytesOverlap(A.T, A.T));
}

TEST(ServeOverlap, SeparateBuffersAndEmptyTensors) {
  std::vector<float> X(16), Y(16);
  View A(X.data(), 0, {16}, {1}), B(Y.data(), 0, {16}, {1});
  View E(X.data(), 0, {0, 16}, {16, 1});
  EXPECT_FALSE(bytesOverlap(A.T, B.T));
  EXPECT_FALSE(bytesOverlap(A.T, E.T)); // no elements, no bytes
}

TEST(ServeOverlap, RangesNotElements) {
  // Interleaved columns share no element but their byte ranges overlap:
  // the check is conservative (a miss, never a wrong answer).
  std::vector<float> Buf(8);
  View Even(Buf.data(), 0, {4}, {2}), Odd(Buf.data(), 1, {4}, {2});
  EXPECT_TRUE(bytesOverlap(Even.T, Odd.T));
  // A transposed view spans the same bytes as the matrix.
  View M(Buf.data(), 0, {2, 4}, {4, 1}), MT(Buf.data(), 0, {4, 2}, {1, 4});
  EXPECT_TRUE(bytesOverlap(M.T, MT.T));
  // Stride 0 (expand): one row's bytes.
  View Row(Buf.data(), 4, {3, 4}, {0, 1}), First(Buf.data(), 0, {4}, {1});
  EXPECT_FALSE(bytesOverlap(Row.T, First.T));
}

} // namespace
