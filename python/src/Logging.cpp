//===- Logging.cpp - guardjit's spdlog logger -----------------------------===//
#include "Logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <memory>

namespace guardjit {
namespace {

spdlog::logger &logger() {
  static std::shared_ptr<spdlog::logger> L = [] {
    auto Sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto Made = std::make_shared<spdlog::logger>("guardjit", Sink);
    Made->set_pattern("[guardjit] %l: %v");
    Made->set_level(spdlog::level::warn);
    Made->flush_on(spdlog::level::trace); // interleave with Python's stderr
    return Made;
  }();
  return *L;
}

spdlog::level::level_enum toSpdlog(LogLevel Level) {
  switch (Level) {
  case LogLevel::Debug:
    return spdlog::level::debug;
  case LogLevel::Info:
    return spdlog::level::info;
  case LogLevel::Warning:
    return spdlog::level::warn;
  case LogLevel::Error:
    return spdlog::level::err;
  case LogLevel::Critical:
    return spdlog::level::critical;
  case LogLevel::Off:
    break;
  }
  return spdlog::level::off;
}

} // namespace

bool logEnabled(LogLevel Level) {
  return Level != LogLevel::Off && logger().should_log(toSpdlog(Level));
}

void logMessage(LogLevel Level, const std::string &Message) {
  if (Level != LogLevel::Off)
    logger().log(toSpdlog(Level), "{}", Message);
}

bool setLogLevel(const std::string &Name) {
  std::string N = Name;
  std::transform(N.begin(), N.end(), N.begin(),
                 [](unsigned char C) { return std::tolower(C); });
  LogLevel Level;
  if (N == "debug")
    Level = LogLevel::Debug;
  else if (N == "info")
    Level = LogLevel::Info;
  else if (N == "warning" || N == "warn")
    Level = LogLevel::Warning;
  else if (N == "error")
    Level = LogLevel::Error;
  else if (N == "critical")
    Level = LogLevel::Critical;
  else if (N == "off")
    Level = LogLevel::Off;
  else
    return false;
  logger().set_level(toSpdlog(Level));
  return true;
}

std::string logLevel() {
  switch (logger().level()) {
  case spdlog::level::trace:
  case spdlog::level::debug:
    return "debug";
  case spdlog::level::info:
    return "info";
  case spdlog::level::warn:
    return "warning";
  case spdlog::level::err:
    return "error";
  case spdlog::level::critical:
    return "critical";
  default:
    return "off";
  }
}

} // namespace guardjit
