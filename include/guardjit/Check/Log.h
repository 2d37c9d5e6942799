//===- Log.h - Where lib/Check's messages go --------------------*- C++ -*-===//
//
// lib/Check writes two kinds of message: a warning when new code disagrees
// with the interpreter on its first call, and a debug line per background
// compile. A front door routes them (the Python module to its spdlog logger,
// GUARDJIT_LOGS); with no sink installed nothing is written. Set the sink
// before the first check target exists; it is read from the background
// thread, so it must be thread-safe and touch no Python object.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_CHECK_LOG_H
#define GUARDJIT_CHECK_LOG_H

#include <string>

namespace guardjit {

enum class CheckLogLevel { Debug, Warning };

struct CheckLogSink {
  /// Whether a message at the level would be written (built only then).
  bool (*Enabled)(CheckLogLevel) = nullptr;
  void (*Write)(CheckLogLevel, const std::string &) = nullptr;
};

/// Installs `Sink` (both fields set, or both null for none).
void setCheckLogSink(CheckLogSink Sink);

bool checkLogEnabled(CheckLogLevel Level);
void checkLog(CheckLogLevel Level, const std::string &Message);

} // namespace guardjit

#endif // GUARDJIT_CHECK_LOG_H
