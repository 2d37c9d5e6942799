//===- GuardTreeReader.cpp - Guard trees out of a torch log ---------------===//
//
// One pass over the lines; no recursion, so deep trees and long lines cost
// linear time and constant stack.
//
//===----------------------------------------------------------------------===//
#include "GuardTreeReader.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

using namespace guardjit;
using llvm::SMLoc;
using llvm::StringRef;
using llvm::Twine;

namespace {

/// A log line split into its prefix and content.
struct LogLine {
  StringRef Content;
  /// Identifies the stream the line belongs to: the `[frame] [logger] ` part
  /// of a glog-prefixed line, empty for an unprefixed line.
  StringRef Stream;
  StringRef Frame; ///< `0/0` out of `[0/0] `
  bool Prefixed = false;
};

bool isDigits(StringRef S) {
  return !S.empty() && llvm::all_of(S, llvm::isDigit);
}

/// Consumes a `[...] ` group at the front of `S` (or `[...]` ending it: an
/// editor may have trimmed the blank of a line without content).
bool consumeBracketGroup(StringRef &S, StringRef &Inner) {
  if (!S.starts_with("["))
    return false;
  size_t End = S.find(']');
  if (End == StringRef::npos || (End + 1 < S.size() && S[End + 1] != ' '))
    return false;
  Inner = S.slice(1, End);
  S = S.drop_front(std::min(End + 2, S.size()));
  return true;
}

/// Splits off torch's log prefix (torch/_logging/_internal.py, glog style):
/// `<L><MMDD> <hh:mm:ss.uuuuuu> <thread> <file>:<line>] [<frame>] [<logger>] `
/// where the frame and logger groups are optional.
LogLine splitPrefix(StringRef Line) {
  LogLine L;
  L.Content = Line;
  if (Line.size() < 7 || !StringRef("VIWEC").contains(Line[0]) ||
      !isDigits(Line.substr(1, 4)) || Line[5] != ' ')
    return L;
  size_t Close = Line.find("] ");
  if (Close == StringRef::npos && Line.ends_with("]"))
    Close = Line.size() - 1;
  if (Close == StringRef::npos)
    return L;
  StringRef Head = Line.slice(6, Close);
  // `<time> <thread> <file>:<line>`: at least a ':' and a blank in it.
  if (!Head.contains(':') || !Head.contains(' '))
    return L;
  StringRef Rest = Line.drop_front(std::min(Close + 2, Line.size()));
  StringRef StreamStart = Rest, Inner;
  if (consumeBracketGroup(Rest, Inner) && Inner.contains('/')) {
    L.Frame = Inner;
    StringRef Logger;
    consumeBracketGroup(Rest, Logger);
  } else {
    Rest = StreamStart;
    consumeBracketGroup(Rest, Inner);
  }
  L.Stream = StreamStart.take_front(StreamStart.size() - Rest.size()).rtrim(" ");
  L.Content = Rest;
  L.Prefixed = true;
  return L;
}

LogLine splitLogLine(StringRef Line) { return splitPrefix(Line.rtrim("\r")); }

class Reader {
public:
  Reader(llvm::SourceMgr &SM, unsigned BufferId)
      : SM(SM), Text(SM.getMemoryBuffer(BufferId)->getBuffer()) {}

  bool run(std::vector<GuardTree> &Out);

private:
  bool error(SMLoc Loc, const Twine &Msg) {
    SM.PrintMessage(Loc, llvm::SourceMgr::DK_Error, Msg);
    return false;
  }
  static SMLoc at(StringRef S) { return SMLoc::getFromPointer(S.data()); }

  /// Reads the lines of the tree whose header is at `Pos`.
  bool readTree(GuardTree &T, const LogLine &Header);
  bool addNode(GuardTree &T, StringRef Content);
  bool parseManager(TreeNode &N, StringRef S);

  /// Returns the next line (without its end) and advances, or false at EOF.
  bool nextLine(StringRef &Line) {
    if (Pos >= Text.size())
      return false;
    size_t End = Text.find('\n', Pos);
    if (End == StringRef::npos)
      End = Text.size();
    Line = Text.slice(Pos, End);
    Pos = End + 1;
    return true;
  }

  llvm::SourceMgr &SM;
  StringRef Text;
  size_t Pos = 0;
  /// Index of the open node at each depth of the current tree.
  std::vector<int> Open;
};

bool Reader::run(std::vector<GuardTree> &Out) {
  StringRef Line;
  while (nextLine(Line)) {
    LogLine L = splitLogLine(Line);
    if (L.Content.rtrim(" ") != "TREE_GUARD_MANAGER:")
      continue;
    GuardTree T;
    T.Loc = at(L.Content);
    T.Name = L.Frame.empty() ? "tree_" + std::to_string(Out.size())
                             : L.Frame.str();
    if (!readTree(T, L))
      return false;
    Out.push_back(std::move(T));
  }
  return true;
}

bool Reader::readTree(GuardTree &T, const LogLine &Header) {
  Open.clear();
  StringRef Line;
  StringRef LastContent = Header.Content;
  while (nextLine(Line)) {
    LogLine L = splitLogLine(Line);
    // Lines of other frames, other loggers and unprefixed output (print())
    // may be interleaved with a prefixed tree: they are not part of it.
    if (Header.Prefixed && (!L.Prefixed || L.Stream != Header.Stream))
      continue;
    StringRef C = L.Content;
    if (C.trim(" ").empty()) {
      if (T.Nodes.empty())
        return error(at(C), "guard tree has no '+- RootGuardManager' line");
      return true;
    }
    if (!C.starts_with("|") && !C.starts_with("+"))
      return error(at(C), "expected a guard tree line ('+- ...') or a blank "
                          "line ending the tree");
    if (!addNode(T, C))
      return false;
    LastContent = C;
  }
  return error(at(LastContent.drop_front(LastContent.size())),
               "guard tree is truncated: the input ends before the blank line "
               "that ends it");
}

bool Reader::addNode(GuardTree &T, StringRef C) {
  // "| " * depth + "+- " + text.
  unsigned Depth = 0;
  StringRef S = C;
  while (S.starts_with("| ")) {
    S = S.drop_front(2);
    ++Depth;
  }
  if (!S.starts_with("+- "))
    return error(at(S), "bad indentation: expected '| ' or '+- '");
  S = S.drop_front(3);
  TreeNode N;
  N.Depth = Depth;
  N.Text = S;
  N.Loc = at(S);

  // Kind of node, from its text.
  if (S == "RootGuardManager") {
    N.Kind = TreeNode::Root;
  } else if (S.consume_front("KeyValueManager pair at index=")) {
    N.Kind = TreeNode::KeyValuePair;
    if (S.getAsInteger(10, N.Index) || N.Index < 0)
      return error(at(S), "expected a dict index after 'index='");
  } else if (S.starts_with("KeyManager: ") || S.starts_with("ValueManager: ") ||
             S.split(':').first.ends_with("GuardManager")) {
    N.Kind = TreeNode::Manager;
    if (!parseManager(N, S))
      return false;
  } else {
    StringRef Name = S.take_while(
        [](char Ch) { return llvm::isUpper(Ch) || llvm::isDigit(Ch) || Ch == '_'; });
    StringRef Rest = S.drop_front(Name.size());
    if (Name.empty() || !llvm::isUpper(Name[0]) ||
        !(Rest.empty() || Rest.starts_with(": ") || Rest == ":"))
      return error(N.Loc, "expected a guard manager or a guard after '+- '");
    N.Kind = TreeNode::Leaf;
    N.GuardName = Name;
    N.Body = Rest.drop_front(std::min<size_t>(2, Rest.size()));
    N.BodyLoc = at(N.Body);
  }

  // Structure: the first node is the root; depth 0 afterwards holds the
  // root's epilogue guards; every other node hangs under an open node one
  // level up that may have children of its kind.
  if (T.Nodes.empty()) {
    if (N.Kind != TreeNode::Root || Depth != 0)
      return error(at(C), "expected '+- RootGuardManager' as the first line of "
                          "the guard tree");
  } else if (N.Kind == TreeNode::Root) {
    return error(N.Loc, "a guard tree has one RootGuardManager");
  } else if (Depth == 0) {
    if (N.Kind != TreeNode::Leaf)
      return error(at(C), "bad indentation: only epilogue guards follow the "
                          "root at depth 0");
  } else {
    if (Depth > Open.size())
      return error(at(C), "bad indentation: line at depth " + Twine(Depth) +
                              " has no parent at depth " + Twine(Depth - 1));
    const TreeNode &P = T.Nodes[Open[Depth - 1]];
    N.Parent = Open[Depth - 1];
    bool KeyOrValue = N.Kind == TreeNode::Manager && !N.Role.empty();
    if (P.Kind == TreeNode::Leaf)
      return error(at(C), "bad indentation: a guard has no children");
    if (P.Kind == TreeNode::KeyValuePair && !KeyOrValue)
      return error(N.Loc, "expected 'KeyManager:' or 'ValueManager:' under a "
                          "KeyValueManager pair");
    if (KeyOrValue && P.Kind != TreeNode::KeyValuePair)
      return error(N.Loc, "'" + N.Role +
                              ":' outside a KeyValueManager pair");
    if (N.Kind == TreeNode::KeyValuePair && !P.isDictManager())
      return error(N.Loc, "KeyValueManager pair outside a DictGuardManager");
    if (N.Kind == TreeNode::Manager && !KeyOrValue && N.Accessor.empty())
      return error(N.Loc, "expected 'accessed_by=' in a guard manager line");
  }
  Open.resize(Depth);
  // Epilogue guards come last: nothing nests under the root after them.
  if (!(Depth == 0 && N.Kind == TreeNode::Leaf))
    Open.push_back(static_cast<int>(T.Nodes.size()));
  T.Nodes.push_back(N);
  return true;
}

bool Reader::parseManager(TreeNode &N, StringRef S) {
  if (S.consume_front("KeyManager: "))
    N.Role = "KeyManager";
  else if (S.consume_front("ValueManager: "))
    N.Role = "ValueManager";
  auto [Class, Rest] = S.split(": ");
  if (!Class.ends_with("GuardManager") || Class.size() == S.size())
    return error(at(S), "expected a guard manager class name, e.g. "
                        "'GuardManager: '");
  N.Class = Class;
  if (!Rest.consume_front("source="))
    return error(at(Rest), "expected 'source=' after '" + Class + ": '");
  // From the right: `, tag_safe=(...)` and `, type=<...>` are torch 2.13's
  // additions; a source may contain commas but not these markers.
  size_t Tag = Rest.rfind(", tag_safe=(");
  if (Tag != StringRef::npos) {
    if (!Rest.ends_with(")"))
      return error(at(Rest.drop_front(Tag + 2)),
                   "expected ')' at the end of 'tag_safe=('");
    Rest = Rest.take_front(Tag);
  }
  size_t Type = Rest.rfind(", type=");
  if (Type != StringRef::npos) {
    N.Type = Rest.drop_front(Type + strlen(", type="));
    Rest = Rest.take_front(Type);
  }
  size_t Acc = Rest.find(", accessed_by=");
  if (Acc != StringRef::npos) {
    N.Accessor = Rest.drop_front(Acc + strlen(", accessed_by="));
    N.AccessorLoc = at(N.Accessor);
    if (N.Accessor.empty())
      return error(N.AccessorLoc, "expected an accessor after 'accessed_by='");
    Rest = Rest.take_front(Acc);
  }
  N.Source = Rest;
  if (N.Source.empty())
    return error(at(Rest), "expected a source after 'source='");
  return true;
}

} // namespace

bool guardjit::readGuardTrees(llvm::SourceMgr &SM, unsigned BufferId,
                              std::vector<GuardTree> &Out) {
  return Reader(SM, BufferId).run(Out);
}
