//===- Logging.h - guardjit's spdlog logger -------------------*- C++ -*-===//
//
// The C++ side of GUARDJIT_LOGS. guardjit/_logging.py reads the variable and
// sets this logger's level and the Python "guardjit" logger's alike
// (`_core.set_log_level`). Messages go to stderr as "[guardjit] level: ...",
// the format of the Python logger's handler. Thread-safe (spdlog's _mt sink);
// logging never touches Python objects, so it needs no GIL.
//
// This header does not include spdlog: Logging.cpp is compiled on its own,
// without torch's include directories, whose bundled fmt is not the one
// Debian's spdlog is built against.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_PYTHON_LOGGING_H
#define GUARDJIT_PYTHON_LOGGING_H

#include <string>

namespace guardjit {

enum class LogLevel { Debug, Info, Warning, Error, Critical, Off };

/// Whether a message at `Level` would be written (build it only then).
bool logEnabled(LogLevel Level);

/// Writes `Message` at `Level` to the "guardjit" logger (stderr).
void logMessage(LogLevel Level, const std::string &Message);

/// Sets the level from a Python logging name: debug, info, warning (warn),
/// error, critical or off (case-insensitive). Returns false, leaving the
/// level unchanged, for any other name. The initial level is warning.
bool setLogLevel(const std::string &Name);

/// The current level as one of the names setLogLevel accepts.
std::string logLevel();

} // namespace guardjit

#endif // GUARDJIT_PYTHON_LOGGING_H
