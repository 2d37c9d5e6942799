//===- Lexer.h - Tokens of the .gir text format ----------------*- C++ -*-===//
//
// Private to the IR library. The format is line oriented (one entity per
// line, like the printer writes it), so the lexer returns end-of-line tokens;
// blank lines and `//` comments are skipped. Strings are decoded here, so the
// parser sees the exact bytes the printer quoted.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_LIB_IR_LEXER_H
#define GUARDJIT_LIB_IR_LEXER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SMLoc.h"

#include <string>

namespace guardjit {

struct Token {
  enum Kind {
    Eof,
    Eol,        ///< one or more line ends (with comments / blank lines)
    Error,      ///< a lexical error; Lexer::errorMessage() says which
    Identifier, ///< [A-Za-z_][A-Za-z0-9_]*
    ValueRef,   ///< %N (Text is N)
    ObjectRef,  ///< #N (Text is N)
    Integer,    ///< -?[0-9]+ or 0x[0-9a-fA-F]+
    Float,      ///< -?[0-9]+(.[0-9]*)?([eE][+-]?[0-9]+)? with a '.' or 'e'
    OperandRef, ///< $N, an operand of a shape expression (Text is N)
    String,     ///< "..." (Text is the quoted spelling; Lexer::stringValue())
    LBrace,
    RBrace,
    LSquare,
    RSquare,
    Equal,
    Comma,
    Colon,
    Question,
    LParen,
    RParen,
  };
  Kind K = Eof;
  llvm::StringRef Text; ///< points into the buffer
  llvm::SMLoc loc() const { return llvm::SMLoc::getFromPointer(Text.data()); }
  bool is(Kind Other) const { return K == Other; }
  bool isKeyword(llvm::StringRef S) const { return K == Identifier && Text == S; }
};

class Lexer {
public:
  /// `Buffer` must stay alive and end in a NUL (as MemoryBuffer's do).
  explicit Lexer(llvm::StringRef Buffer)
      : Begin(Buffer.begin()), Cur(Buffer.begin()), End(Buffer.end()) {}

  Token lex();
  /// For an Error token: what went wrong (lower case, no period).
  const std::string &errorMessage() const { return ErrorMsg; }
  /// For an Error token: where exactly (may be inside the token).
  llvm::SMLoc errorLoc() const { return ErrorLoc; }
  /// The decoded bytes of the last String token.
  const std::string &stringValue() const { return StringValue; }

private:
  Token make(Token::Kind K, const char *TokStart) {
    return {K, llvm::StringRef(TokStart, Cur - TokStart)};
  }
  Token error(const char *Where, const char *TokStart, std::string Msg);
  Token lexString(const char *TokStart);
  Token lexNumber(const char *TokStart);
  Token lexRef(Token::Kind K, const char *TokStart);
  void skipComment();

  const char *Begin, *Cur, *End;
  std::string ErrorMsg;
  llvm::SMLoc ErrorLoc;
  std::string StringValue;
};

} // namespace guardjit

#endif // GUARDJIT_LIB_IR_LEXER_H
