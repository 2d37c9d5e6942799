//===- ObjectCache.h - On-disk cache of compiled guard sets -----*- C++ -*-===//
//
// Reuses the relocatable object of a guard set (lowerGuardSetRelocatable)
// across processes: `<dir>/<hex key>.o`, keyed by a hash of the set's
// structure, guardjit's lowering version and build, the engine's code level,
// LLVM's version, the host CPU and features, and the host's CPython ABI and
// torch version (docs/object-cache.md). A file carries a header that repeats
// its key, the address-table layout, the lowering statistics and a checksum
// of the object: a renamed, colliding, truncated or corrupt file is a miss,
// never a crash.
//
// Safety: the directory is created private (0700); one owned by another user
// or writable by group or others is refused (the cache is off, with a
// reason). Files are written to a temporary name in the same directory and
// renamed into place, so concurrent writers of one key and readers never see
// a partial file.
//
// Thread-safety: all members may be called from several threads.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_JIT_OBJECTCACHE_H
#define GUARDJIT_JIT_OBJECTCACHE_H

#include "guardjit/JIT/Lowering.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace guardjit {

class GuardSet;

/// Bumped whenever the lowering, the table layout or the file format change
/// in a way the build ID (below) would not catch.
constexpr uint32_t LoweringVersion = 4;

/// A 32-byte key (BLAKE3).
using ObjectCacheKey = std::array<uint8_t, 32>;

/// Counters of one cache (monotonic).
struct ObjectCacheStats {
  uint64_t Hits = 0;
  uint64_t Misses = 0;   ///< no usable file (absent, foreign or corrupt)
  uint64_t Rejected = 0; ///< files found but foreign, corrupt or unlinkable
  uint64_t Stores = 0;
  uint64_t StoreErrors = 0;
};

class ObjectCache {
public:
  /// Opens (creating it with mode 0700, parents too) the cache directory
  /// `Dir`. Returns nullptr with *Reason set when the directory cannot be
  /// created or is not private to this user (owned by another uid, or
  /// writable by group or others).
  static std::unique_ptr<ObjectCache> open(llvm::StringRef Dir,
                                           std::string *Reason);

  /// `Fingerprint`: everything about the engine and host that changes the
  /// code (computed once per engine, see engineFingerprint).
  ObjectCacheKey key(const GuardSet &S, llvm::StringRef Fingerprint) const;

  /// What a file holds besides the object.
  struct Entry {
    std::vector<TableSlot> Table;
    LoweringStats Stats;
    std::unique_ptr<llvm::MemoryBuffer> Object;
  };
  /// The entry of `Key`, or nullopt (a miss: absent, unreadable, foreign or
  /// corrupt; a corrupt file is removed). Never fails otherwise.
  std::optional<Entry> lookup(const ObjectCacheKey &Key);
  /// Writes the entry of `Key` atomically (temporary file + rename).
  llvm::Error store(const ObjectCacheKey &Key, llvm::ArrayRef<TableSlot> Table,
                    const LoweringStats &Stats, llvm::StringRef Object);
  /// Drops the file of `Key` (its object failed to link) and counts it
  /// rejected.
  void reject(const ObjectCacheKey &Key);

  /// `<dir>/<hex key>.o`.
  std::string pathOf(const ObjectCacheKey &Key) const;
  const std::string &directory() const { return Dir; }
  ObjectCacheStats stats() const;
  /// A hit that the caller could not use after all (e.g. linking failed)
  /// counts as a miss.
  void countHitAsMiss();

private:
  explicit ObjectCache(std::string Dir) : Dir(std::move(Dir)) {}
  std::string Dir;
  std::atomic<uint64_t> Hits{0}, Misses{0}, Rejected{0}, Stores{0},
      StoreErrors{0};
};

/// The part of the key that depends on the engine and the host, not on the
/// set: lowering version, build ID of the binary holding guardjit, LLVM
/// version, target triple, CPU and features, code level, and `HostVersions`
/// (CPython ABI and torch version, passed in by the embedder).
std::string engineFingerprint(llvm::StringRef Triple, llvm::StringRef CPU,
                              llvm::StringRef Features, llvm::StringRef Level,
                              llvm::StringRef HostVersions);

/// The object cache directory the environment asks for: GUARDJIT_CACHE_DIR
/// unset, empty, "0" or "off": none (the default); "1", "on" or "default":
/// `$XDG_CACHE_HOME/guardjit` or `~/.cache/guardjit`; anything else: that
/// path.
std::string cacheDirFromEnvironment();

} // namespace guardjit

#endif // GUARDJIT_JIT_OBJECTCACHE_H
