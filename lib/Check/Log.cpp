//===- Log.cpp - Where lib/Check's messages go ----------------------------===//
#include "guardjit/Check/Log.h"

#include <atomic>

namespace guardjit {
namespace {
std::atomic<bool (*)(CheckLogLevel)> Enabled{nullptr};
std::atomic<void (*)(CheckLogLevel, const std::string &)> Write{nullptr};
} // namespace

void setCheckLogSink(CheckLogSink Sink) {
  Write.store(Sink.Write);
  Enabled.store(Sink.Enabled);
}

bool checkLogEnabled(CheckLogLevel Level) {
  auto *E = Enabled.load();
  return E && E(Level);
}

void checkLog(CheckLogLevel Level, const std::string &Message) {
  if (auto *W = Write.load())
    W(Level, Message);
}

} // namespace guardjit
