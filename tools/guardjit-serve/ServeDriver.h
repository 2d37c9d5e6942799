//===- ServeDriver.h - guardjit-serve's command line ------------*- C++ -*-===//
//
// The driver behind the thin main of tools/guardjit-serve: parses the
// command line (ServeDriver.cpp's header lists it), serves, reports.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TOOLS_SERVE_SERVEDRIVER_H
#define GUARDJIT_TOOLS_SERVE_SERVEDRIVER_H

namespace guardjit {
namespace serve {

/// Runs guardjit-serve; the process exit code. Exits on load or I/O errors
/// (ExitOnError, tools only); a guard miss is reported, not an error.
int serveMain(int Argc, char **Argv);

} // namespace serve
} // namespace guardjit

#endif // GUARDJIT_TOOLS_SERVE_SERVEDRIVER_H
