//===- PythonText.cpp - Scanning the Python text of guard lines -----------===//
#include "PythonText.h"

#include "llvm/ADT/StringExtras.h"

#include <string>

using llvm::StringRef;

namespace guardjit::pytext {

namespace {

/// Walks `S` calling `Visit(I, Depth)` for each byte outside string
/// literals; `Visit` returns false to stop. Returns the index it stopped at
/// or S.size().
template <typename Fn> size_t scan(StringRef S, Fn Visit) {
  int Depth = 0;
  char Quote = 0;
  for (size_t I = 0; I < S.size(); ++I) {
    char C = S[I];
    if (Quote) {
      if (C == '\\')
        ++I;
      else if (C == Quote)
        Quote = 0;
      continue;
    }
    if (C == '\'' || C == '"') {
      Quote = C;
      continue;
    }
    if (!Visit(I, Depth))
      return I;
    if (C == '(' || C == '[' || C == '{')
      ++Depth;
    else if ((C == ')' || C == ']' || C == '}') && Depth > 0)
      --Depth;
  }
  return S.size();
}

} // namespace

std::pair<StringRef, StringRef> splitComment(StringRef Part) {
  size_t At = scan(Part, [&](size_t I, int) {
    return !(Part[I] == '#' && I >= 2 && Part.substr(I - 2, 4) == "  # ");
  });
  if (At == Part.size())
    return {Part.rtrim(" "), StringRef()};
  return {Part.take_front(At - 2).rtrim(" "), Part.drop_front(At + 2)};
}

llvm::SmallVector<StringRef, 8> splitArgs(StringRef S) {
  llvm::SmallVector<StringRef, 8> Out;
  size_t Start = 0;
  scan(S, [&](size_t I, int Depth) {
    if (S[I] == ',' && Depth == 0) {
      Out.push_back(S.slice(Start, I).trim(" "));
      Start = I + 1;
    }
    return true;
  });
  StringRef Last = S.drop_front(Start).trim(" ");
  if (!Last.empty() || !Out.empty())
    Out.push_back(Last);
  return Out;
}

std::optional<std::pair<StringRef, StringRef>> callArgs(StringRef S,
                                                        StringRef Prefix) {
  if (!S.starts_with(Prefix) || !S.drop_front(Prefix.size()).starts_with("("))
    return std::nullopt;
  size_t Open = Prefix.size();
  size_t Close = StringRef::npos;
  scan(S, [&](size_t I, int Depth) {
    if (I > Open && S[I] == ')' && Depth == 1) {
      Close = I;
      return false;
    }
    return true;
  });
  if (Close == StringRef::npos)
    return std::nullopt;
  return std::make_pair(S.slice(Open + 1, Close), S.drop_front(Close + 1));
}

std::optional<std::pair<StringRef, StringRef>> splitOperator(StringRef S,
                                                             StringRef Op) {
  std::string Spaced = (" " + Op + " ").str();
  size_t At = scan(S, [&](size_t I, int Depth) {
    return !(Depth == 0 && S.substr(I).starts_with(Spaced));
  });
  if (At == S.size())
    return std::nullopt;
  StringRef L = S.take_front(At).trim(" ");
  StringRef R = S.drop_front(At + Spaced.size()).trim(" ");
  if (L.empty() || R.empty())
    return std::nullopt;
  return std::make_pair(L, R);
}

std::optional<StringRef> plainStr(StringRef Repr) {
  if (Repr.size() < 2 || (Repr[0] != '\'' && Repr[0] != '"') ||
      Repr.back() != Repr[0])
    return std::nullopt;
  StringRef Inner = Repr.drop_front().drop_back();
  if (Inner.contains('\\') || Inner.contains(Repr[0]))
    return std::nullopt;
  return Inner;
}

UserLoc userLoc(StringRef Comment) {
  // `<line text>  # <file>:<n> in <fn>[ (...)]` or `<file>:<n> in <fn>`.
  StringRef Frame = Comment;
  size_t Last = Comment.rfind("  # ");
  if (Last != StringRef::npos)
    Frame = Comment.drop_front(Last + 4);
  size_t In = Frame.find(" in ");
  if (In == StringRef::npos)
    return {};
  StringRef FileLine = Frame.take_front(In);
  size_t Colon = FileLine.rfind(':');
  if (Colon == StringRef::npos)
    return {};
  uint32_t Line = 0;
  StringRef File = FileLine.take_front(Colon);
  if (File.empty() || FileLine.drop_front(Colon + 1).getAsInteger(10, Line))
    return {};
  return {File.str(), Line};
}

} // namespace guardjit::pytext
