//===- Lexer.cpp - Tokens of the .gir text format -------------------------===//
#include "Lexer.h"

#include "llvm/ADT/StringExtras.h"

using namespace guardjit;
using llvm::SMLoc;

static bool isIdentStart(char C) { return llvm::isAlpha(C) || C == '_'; }
static bool isIdentChar(char C) { return llvm::isAlnum(C) || C == '_'; }

/// A byte as it should appear in a message: itself when printable.
static std::string describeChar(char C) {
  unsigned char U = static_cast<unsigned char>(C);
  if (U >= 0x20 && U < 0x7f)
    return std::string(1, C);
  const char *Hex = "0123456789abcdef";
  return {'\\', 'x', Hex[U >> 4], Hex[U & 15]};
}

Token Lexer::error(const char *Where, const char *TokStart, std::string Msg) {
  ErrorMsg = std::move(Msg);
  ErrorLoc = SMLoc::getFromPointer(Where);
  if (Cur == TokStart && Cur != End)
    ++Cur; // always make progress
  return make(Token::Error, TokStart);
}

void Lexer::skipComment() {
  while (Cur != End && *Cur != '\n')
    ++Cur;
}

Token Lexer::lex() {
  while (true) {
    const char *TokStart = Cur;
    if (Cur == End)
      return make(Token::Eof, TokStart);
    char C = *Cur++;
    switch (C) {
    case ' ':
    case '\t':
    case '\r':
      continue;
    case '\n': {
      // One token for a run of line ends, blank lines and comment lines.
      while (Cur != End) {
        if (*Cur == ' ' || *Cur == '\t' || *Cur == '\r' || *Cur == '\n')
          ++Cur;
        else if (*Cur == '/' && Cur + 1 != End && Cur[1] == '/')
          skipComment();
        else
          break;
      }
      return {Token::Eol, llvm::StringRef(TokStart, 1)};
    }
    case '/':
      if (Cur != End && *Cur == '/') {
        skipComment();
        continue;
      }
      return error(TokStart, TokStart, "unexpected character '/'");
    case '{':
      return make(Token::LBrace, TokStart);
    case '}':
      return make(Token::RBrace, TokStart);
    case '[':
      return make(Token::LSquare, TokStart);
    case ']':
      return make(Token::RSquare, TokStart);
    case '=':
      return make(Token::Equal, TokStart);
    case ',':
      return make(Token::Comma, TokStart);
    case ':':
      return make(Token::Colon, TokStart);
    case '?':
      return make(Token::Question, TokStart);
    case '(':
      return make(Token::LParen, TokStart);
    case ')':
      return make(Token::RParen, TokStart);
    case '$':
      return lexRef(Token::OperandRef, TokStart);
    case '"':
      return lexString(TokStart);
    case '%':
      return lexRef(Token::ValueRef, TokStart);
    case '#':
      return lexRef(Token::ObjectRef, TokStart);
    default:
      if (llvm::isDigit(C) || (C == '-' && Cur != End && llvm::isDigit(*Cur)))
        return lexNumber(TokStart);
      // `-inf`, the one negative float constant that is not a number token.
      if (C == '-' && llvm::StringRef(Cur, End - Cur).starts_with("inf") &&
          (Cur + 3 == End || !isIdentChar(Cur[3]))) {
        Cur += 3;
        return make(Token::Identifier, TokStart);
      }
      if (isIdentStart(C)) {
        while (Cur != End && isIdentChar(*Cur))
          ++Cur;
        return make(Token::Identifier, TokStart);
      }
      return error(TokStart, TokStart,
                   "unexpected character '" + describeChar(C) + "'");
    }
  }
}

Token Lexer::lexNumber(const char *TokStart) {
  bool Hex = *TokStart == '0' && Cur != End && (*Cur == 'x' || *Cur == 'X');
  if (Hex) {
    ++Cur;
    const char *Digits = Cur;
    while (Cur != End && llvm::isHexDigit(*Cur))
      ++Cur;
    if (Cur == Digits)
      return error(Digits, TokStart, "expected hexadecimal digits after '0x'");
  } else {
    while (Cur != End && llvm::isDigit(*Cur))
      ++Cur;
    // A float: digits '.' digits* and/or an exponent (shape expressions).
    bool IsFloat = false;
    if (Cur != End && *Cur == '.') {
      IsFloat = true;
      ++Cur;
      while (Cur != End && llvm::isDigit(*Cur))
        ++Cur;
    }
    if (Cur != End && (*Cur == 'e' || *Cur == 'E')) {
      const char *Exp = Cur + 1;
      if (Exp != End && (*Exp == '+' || *Exp == '-'))
        ++Exp;
      if (Exp != End && llvm::isDigit(*Exp)) {
        IsFloat = true;
        Cur = Exp;
        while (Cur != End && llvm::isDigit(*Cur))
          ++Cur;
      }
    }
    if (IsFloat) {
      if (Cur != End && isIdentChar(*Cur)) {
        while (Cur != End && isIdentChar(*Cur))
          ++Cur;
        return error(TokStart, TokStart,
                     "invalid number '" + std::string(TokStart, Cur) + "'");
      }
      return make(Token::Float, TokStart);
    }
  }
  // "12ab" is one bad token, not a number followed by an identifier.
  if (Cur != End && isIdentChar(*Cur)) {
    while (Cur != End && isIdentChar(*Cur))
      ++Cur;
    return error(TokStart, TokStart,
                 "invalid integer '" + std::string(TokStart, Cur) + "'");
  }
  return make(Token::Integer, TokStart);
}

Token Lexer::lexRef(Token::Kind K, const char *TokStart) {
  const char *Digits = Cur;
  while (Cur != End && llvm::isDigit(*Cur))
    ++Cur;
  if (Cur == Digits)
    return error(TokStart, TokStart,
                 std::string("expected a number after '") + *TokStart + "'");
  if (Cur != End && isIdentChar(*Cur)) {
    while (Cur != End && isIdentChar(*Cur))
      ++Cur;
    return error(TokStart, TokStart,
                 "invalid reference '" + std::string(TokStart, Cur) + "'");
  }
  return {K, llvm::StringRef(Digits, Cur - Digits)};
}

Token Lexer::lexString(const char *TokStart) {
  StringValue.clear();
  while (true) {
    if (Cur == End || *Cur == '\n')
      return error(TokStart, TokStart, "unterminated string");
    char C = *Cur++;
    if (C == '"')
      return make(Token::String, TokStart);
    if (C != '\\') {
      StringValue += C;
      continue;
    }
    const char *Escape = Cur - 1;
    if (Cur == End)
      return error(TokStart, TokStart, "unterminated string");
    switch (char E = *Cur++) {
    case '"':
    case '\\':
      StringValue += E;
      break;
    case 'n':
      StringValue += '\n';
      break;
    case 't':
      StringValue += '\t';
      break;
    case 'x': {
      if (End - Cur < 2 || !llvm::isHexDigit(Cur[0]) ||
          !llvm::isHexDigit(Cur[1])) {
        // Resume after the string so one bad escape is one error.
        return error(Escape, TokStart,
                     "expected two hexadecimal digits after '\\x'");
      }
      StringValue += static_cast<char>(llvm::hexFromNibbles(Cur[0], Cur[1]));
      Cur += 2;
      break;
    }
    default:
      return error(Escape, TokStart,
                   "unknown escape '\\" + describeChar(E) + "' in string");
    }
  }
}
