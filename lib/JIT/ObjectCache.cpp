//===- ObjectCache.cpp - On-disk cache of compiled guard sets -------------===//
//
// File layout (host byte order; a file is only ever read on the host that
// wrote it, which the key's triple and CPU already require):
//
//   Header            96 bytes, below
//   table layout      NumSlots x {u32 kind, u32 index}
//   padding           to a multiple of 16
//   object            ObjectSize bytes of ELF
//
// The checksum (xxh3) covers the lowering statistics, the layout and the
// object; the key is repeated so a file under another name is foreign.
//
//===----------------------------------------------------------------------===//
#include "guardjit/JIT/ObjectCache.h"

#include "guardjit/IR/GuardSet.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/BLAKE3.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/xxhash.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace llvm;

namespace guardjit {

namespace {

constexpr char Magic[8] = {'G', 'J', 'O', 'B', 'J', 'C', '0', '1'};
/// Larger files are not ours (a 10,000-guard set is ~0.5 MB).
constexpr uint64_t MaxFileSize = uint64_t(256) << 20;

struct FileHeader {
  char Magic[8];
  uint8_t Key[32];
  uint32_t LoweringVersion;
  uint32_t NumSlots;
  uint64_t ObjectSize;
  uint64_t Checksum;
  uint64_t Stats[4]; ///< NumGuards, NumInlined, NumHelpers, NumInlineReads
};
static_assert(sizeof(FileHeader) == 96, "no padding in the header");
static_assert(sizeof(TableSlot) <= 8, "slots are stored as two u32");

size_t layoutBytes(uint32_t NumSlots) {
  return alignTo(size_t(NumSlots) * 8, 16);
}

uint64_t checksum(const FileHeader &H, ArrayRef<uint8_t> Layout,
                  StringRef Object) {
  // Three independent hashes combined: no copy of the object is needed.
  uint64_t A = xxh3_64bits(ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(H.Stats), sizeof(H.Stats)));
  uint64_t B = xxh3_64bits(Layout);
  uint64_t C = xxh3_64bits(Object);
  return A ^ (B * 0x9E3779B97F4A7C15ULL) ^ (C * 0xC2B2AE3D27D4EB4FULL) ^
         H.ObjectSize;
}

/// Feeds the structure of a guard set to a hash: every field the lowering
/// reads, and the other semantic fields for good measure, but none of the
/// descriptions that change from one process to the next or do not reach
/// the code (sources, reprs, locations, verbose code, binding names,
/// origins, the set's name).
class StructHasher {
public:
  /// Fields are serialized into one buffer, hashed once at the end: one
  /// BLAKE3 update per field cost ~0.3 ms for 1,000 guards.
  void u64(uint64_t V) {
    // LEB128: most fields are small ids and kinds. Written through a local
    // pointer: push_back per byte reloaded and stored the vector's size for
    // every byte (a byte store may alias it), which made serializing most of
    // the key's ~30 us at 1,000 guards.
    size_t N = Buf.size();
    Buf.resize_for_overwrite(N + 10);
    uint8_t *Start = Buf.data() + N, *P = Start;
    while (V >= 0x80) {
      *P++ = uint8_t(V) | 0x80;
      V >>= 7;
    }
    *P++ = uint8_t(V);
    Buf.truncate(N + size_t(P - Start));
  }
  void str(StringRef S) {
    u64(S.size());
    Buf.append(S.begin(), S.end());
  }
  void set(const GuardSet &S) {
    Buf.reserve(32 * (S.guards().size() + S.values().size()) + 256);
    u64(S.objects().size());
    for (const ObjectEntry &O : S.objects()) {
      u64(uint64_t(O.Kind));
      u64(O.Strong);
    }
    u64(S.values().size());
    for (const guardjit::Value &V : S.values()) {
      u64(uint64_t(V.Kind));
      u64(V.Parent);
      str(V.Name);
      u64(uint64_t(V.Index));
      u64(V.Key);
    }
    u64(S.tensorSpecs().size());
    for (const TensorSpec &T : S.tensorSpecs()) {
      u64(T.PyType);
      u64(T.DispatchKeys);
      u64(uint64_t(T.DType));
      u64(uint64_t(T.DeviceIndex));
      u64(T.RequiresGrad);
      dims(T.Sizes);
      dims(T.Strides);
    }
    u64(S.guards().size());
    for (const Guard &G : S.guards()) {
      u64(uint64_t(G.Kind));
      u64(G.Operands.size());
      for (ValueId Op : G.Operands)
        u64(Op);
      u64(G.Object);
      u64(G.Aux);
      u64(uint64_t(G.Int));
      u64(G.Ints.size());
      for (int64_t I : G.Ints)
        u64(uint64_t(I));
      str(G.Str);
      u64(G.Tensor);
      u64(G.Expr.size());
      for (const ShapeNode &N : G.Expr) {
        u64(uint64_t(N.Op));
        u64(uint64_t(N.Int));
        uint64_t Bits;
        std::memcpy(&Bits, &N.Float, 8);
        u64(Bits);
        u64(N.Args.size());
        for (uint32_t A : N.Args)
          u64(A);
      }
    }
  }
  ObjectCacheKey finish(StringRef Fingerprint) {
    str(Fingerprint);
    return BLAKE3::hash(ArrayRef<uint8_t>(Buf.data(), Buf.size()));
  }

private:
  void dims(const std::vector<std::optional<int64_t>> &D) {
    u64(D.size());
    for (const auto &X : D) {
      u64(X.has_value());
      u64(uint64_t(X.value_or(0)));
    }
  }
  SmallVector<uint8_t, 0> Buf;
};

// A new field in these structs must be hashed above (or be a description):
// these sizes are a tripwire for the common 64-bit libstdc++ build.
#if defined(__x86_64__) && defined(__GLIBCXX__)
static_assert(sizeof(guardjit::Value) == 96 && sizeof(Guard) == 240 &&
                  sizeof(ObjectEntry) == 88 && sizeof(TensorSpec) == 72 &&
                  sizeof(ShapeNode) == 48,
              "a Guard IR struct changed: update StructHasher");
#endif

/// The GNU build ID of the binary that holds this code, in hex; or, without
/// one, its path, size and modification time.
std::string buildId() {
  struct Search {
    uintptr_t Address;
    std::string Id;
  } S{reinterpret_cast<uintptr_t>(&buildId), {}};
  dl_iterate_phdr(
      [](struct dl_phdr_info *Info, size_t, void *Data) -> int {
        auto *S = static_cast<Search *>(Data);
        bool Contains = false;
        for (int I = 0; I < Info->dlpi_phnum && !Contains; ++I) {
          const ElfW(Phdr) &Ph = Info->dlpi_phdr[I];
          uintptr_t Start = Info->dlpi_addr + Ph.p_vaddr;
          Contains = Ph.p_type == PT_LOAD && S->Address >= Start &&
                     S->Address < Start + Ph.p_memsz;
        }
        if (!Contains)
          return 0;
        for (int I = 0; I < Info->dlpi_phnum; ++I) {
          const ElfW(Phdr) &Ph = Info->dlpi_phdr[I];
          if (Ph.p_type != PT_NOTE)
            continue;
          const char *P =
              reinterpret_cast<const char *>(Info->dlpi_addr + Ph.p_vaddr);
          const char *End = P + Ph.p_memsz;
          while (P + sizeof(ElfW(Nhdr)) <= End) {
            auto *N = reinterpret_cast<const ElfW(Nhdr) *>(P);
            const char *Name = P + sizeof(ElfW(Nhdr));
            const char *Desc = Name + alignTo(N->n_namesz, 4);
            if (Desc + N->n_descsz > End)
              break;
            if (N->n_type == NT_GNU_BUILD_ID && N->n_namesz == 4 &&
                std::memcmp(Name, "GNU", 4) == 0) {
              S->Id = "build-id:" +
                      toHex(StringRef(Desc, N->n_descsz), /*LowerCase=*/true);
              return 1;
            }
            P = Desc + alignTo(N->n_descsz, 4);
          }
        }
        std::string Path = Info->dlpi_name && *Info->dlpi_name
                               ? Info->dlpi_name
                               : "/proc/self/exe";
        struct stat St;
        if (::stat(Path.c_str(), &St) == 0)
          S->Id = formatv("file:{0}:{1}:{2}", Path, St.st_size,
                          St.st_mtim.tv_sec * 1000000000LL +
                              St.st_mtim.tv_nsec)
                      .str();
        return 1;
      },
      &S);
  return S.Id.empty() ? "unknown-build" : S.Id;
}

std::string hexKey(const ObjectCacheKey &Key) {
  return toHex(ArrayRef<uint8_t>(Key.data(), Key.size()), /*LowerCase=*/true);
}

bool readAll(int FD, void *Buf, size_t Size, off_t Offset) {
  auto *P = static_cast<char *>(Buf);
  while (Size) {
    ssize_t N = ::pread(FD, P, Size, Offset);
    if (N < 0 && errno == EINTR)
      continue;
    if (N <= 0)
      return false;
    P += N;
    Size -= size_t(N);
    Offset += N;
  }
  return true;
}

bool writeAll(int FD, const void *Buf, size_t Size) {
  auto *P = static_cast<const char *>(Buf);
  while (Size) {
    ssize_t N = ::write(FD, P, Size);
    if (N < 0 && errno == EINTR)
      continue;
    if (N <= 0)
      return false;
    P += N;
    Size -= size_t(N);
  }
  return true;
}

} // namespace

std::string engineFingerprint(StringRef Triple, StringRef CPU,
                              StringRef Features, StringRef Level,
                              StringRef HostVersions) {
  static const std::string Build = buildId();
  return formatv("guardjit-lowering={0}\n{1}\nllvm={2}\ntriple={3}\ncpu={4}\n"
                 "features={5}\nlevel={6}\nhost={7}\n",
                 LoweringVersion, Build, LLVM_VERSION_STRING, Triple, CPU,
                 Features, Level, HostVersions)
      .str();
}

std::string cacheDirFromEnvironment() {
  const char *Env = std::getenv("GUARDJIT_CACHE_DIR");
  StringRef V = Env ? StringRef(Env).trim() : StringRef();
  if (V.empty() || V == "0" || V.equals_insensitive("off"))
    return {};
  if (V == "1" || V.equals_insensitive("on") ||
      V.equals_insensitive("default")) {
    SmallString<128> Dir;
    if (const char *Xdg = std::getenv("XDG_CACHE_HOME"); Xdg && *Xdg == '/')
      Dir = Xdg;
    else if (const char *Home = std::getenv("HOME"); Home && *Home)
      sys::path::append(Dir, Home, ".cache");
    else
      return {};
    sys::path::append(Dir, "guardjit");
    return std::string(Dir);
  }
  return V.str();
}

std::unique_ptr<ObjectCache> ObjectCache::open(StringRef Dir,
                                               std::string *Reason) {
  auto Fail = [&](const Twine &Why) -> std::unique_ptr<ObjectCache> {
    if (Reason)
      *Reason = ("object cache '" + Dir + "' disabled: " + Why).str();
    return nullptr;
  };
  if (Dir.empty())
    return Fail("no directory");
  if (std::error_code EC =
          sys::fs::create_directories(Dir, /*IgnoreExisting=*/true,
                                      sys::fs::owner_all))
    return Fail("cannot create it: " + EC.message());
  struct stat St;
  if (::stat(Dir.str().c_str(), &St) != 0)
    return Fail(Twine("cannot stat it: ") + std::strerror(errno));
  if (!S_ISDIR(St.st_mode))
    return Fail("not a directory");
  if (St.st_uid != ::geteuid())
    return Fail("owned by another user");
  if (St.st_mode & (S_IWGRP | S_IWOTH))
    return Fail("writable by group or others");
  return std::unique_ptr<ObjectCache>(new ObjectCache(Dir.str()));
}

ObjectCacheKey ObjectCache::key(const GuardSet &S,
                                StringRef Fingerprint) const {
  StructHasher H;
  H.set(S);
  return H.finish(Fingerprint);
}

std::string ObjectCache::pathOf(const ObjectCacheKey &Key) const {
  return Dir + "/" + hexKey(Key) + ".o";
}

std::optional<ObjectCache::Entry>
ObjectCache::lookup(const ObjectCacheKey &Key) {
  std::string Path = pathOf(Key);
  int FD = ::open(Path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (FD < 0) {
    Misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  auto Corrupt = [&]() -> std::optional<Entry> {
    ::close(FD);
    // Whatever it is, it is not an entry of this key: make room for one.
    ::unlink(Path.c_str());
    Rejected.fetch_add(1, std::memory_order_relaxed);
    Misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  };
  struct stat St;
  FileHeader H;
  if (::fstat(FD, &St) != 0 || !S_ISREG(St.st_mode) ||
      St.st_uid != ::geteuid() || uint64_t(St.st_size) < sizeof(H) ||
      uint64_t(St.st_size) > MaxFileSize ||
      !readAll(FD, &H, sizeof(H), 0))
    return Corrupt();
  if (std::memcmp(H.Magic, Magic, sizeof(Magic)) != 0 ||
      std::memcmp(H.Key, Key.data(), Key.size()) != 0 ||
      H.LoweringVersion != LoweringVersion ||
      uint64_t(St.st_size) !=
          sizeof(H) + layoutBytes(H.NumSlots) + H.ObjectSize)
    return Corrupt();

  std::vector<uint8_t> Layout(layoutBytes(H.NumSlots));
  auto Object = WritableMemoryBuffer::getNewUninitMemBuffer(
      H.ObjectSize, Path, /*Alignment=*/Align(16));
  if (!Object || !readAll(FD, Layout.data(), Layout.size(), sizeof(H)) ||
      !readAll(FD, Object->getBufferStart(), H.ObjectSize,
               off_t(sizeof(H) + Layout.size())))
    return Corrupt();
  if (checksum(H, Layout,
               StringRef(Object->getBufferStart(), Object->getBufferSize())) !=
      H.Checksum)
    return Corrupt();
  ::close(FD);

  Entry E;
  E.Table.reserve(H.NumSlots);
  for (uint32_t I = 0; I < H.NumSlots; ++I) {
    uint32_t Kind, Index;
    std::memcpy(&Kind, &Layout[I * 8], 4);
    std::memcpy(&Index, &Layout[I * 8 + 4], 4);
    if (Kind > TableSlot::LastKind) {
      ::unlink(Path.c_str());
      Rejected.fetch_add(1, std::memory_order_relaxed);
      Misses.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    E.Table.push_back({static_cast<TableSlot::SlotKind>(Kind), Index});
  }
  E.Stats.NumGuards = H.Stats[0];
  E.Stats.NumInlined = H.Stats[1];
  E.Stats.NumHelpers = H.Stats[2];
  E.Stats.NumInlineReads = H.Stats[3];
  E.Object = std::move(Object);
  Hits.fetch_add(1, std::memory_order_relaxed);
  return E;
}

Error ObjectCache::store(const ObjectCacheKey &Key, ArrayRef<TableSlot> Table,
                         const LoweringStats &Stats, StringRef Object) {
  FileHeader H;
  std::memset(&H, 0, sizeof(H));
  std::memcpy(H.Magic, Magic, sizeof(Magic));
  std::memcpy(H.Key, Key.data(), Key.size());
  H.LoweringVersion = LoweringVersion;
  H.NumSlots = static_cast<uint32_t>(Table.size());
  H.ObjectSize = Object.size();
  H.Stats[0] = Stats.NumGuards;
  H.Stats[1] = Stats.NumInlined;
  H.Stats[2] = Stats.NumHelpers;
  H.Stats[3] = Stats.NumInlineReads;
  std::vector<uint8_t> Layout(layoutBytes(H.NumSlots), 0);
  for (size_t I = 0; I < Table.size(); ++I) {
    uint32_t Kind = Table[I].Kind, Index = Table[I].Index;
    std::memcpy(&Layout[I * 8], &Kind, 4);
    std::memcpy(&Layout[I * 8 + 4], &Index, 4);
  }
  H.Checksum = checksum(H, Layout, Object);

  // A temporary name unique to this writer; rename(2) makes the file appear
  // whole, and the last of concurrent writers of one key wins (their files
  // are identical).
  static std::atomic<uint64_t> Counter{0};
  std::string Final = pathOf(Key);
  std::string Temp =
      formatv("{0}/.tmp-{1}-{2}-{3}", Dir, hexKey(Key).substr(0, 16),
              ::getpid(), Counter.fetch_add(1, std::memory_order_relaxed))
          .str();
  auto Failed = [&](const char *What) -> Error {
    int Errno = errno;
    StoreErrors.fetch_add(1, std::memory_order_relaxed);
    return createStringError(std::error_code(Errno, std::generic_category()),
                             "object cache: cannot %s '%s': %s", What,
                             Temp.c_str(), std::strerror(Errno));
  };
  int FD = ::open(Temp.c_str(),
                  O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (FD < 0)
    return Failed("create");
  bool Ok = writeAll(FD, &H, sizeof(H)) &&
            writeAll(FD, Layout.data(), Layout.size()) &&
            writeAll(FD, Object.data(), Object.size());
  if (::close(FD) != 0)
    Ok = false;
  if (!Ok) {
    Error E = Failed("write");
    ::unlink(Temp.c_str());
    return E;
  }
  if (::rename(Temp.c_str(), Final.c_str()) != 0) {
    Error E = Failed("rename");
    ::unlink(Temp.c_str());
    return E;
  }
  Stores.fetch_add(1, std::memory_order_relaxed);
  return Error::success();
}

void ObjectCache::reject(const ObjectCacheKey &Key) {
  ::unlink(pathOf(Key).c_str());
  Rejected.fetch_add(1, std::memory_order_relaxed);
  countHitAsMiss();
}

void ObjectCache::countHitAsMiss() {
  Hits.fetch_sub(1, std::memory_order_relaxed);
  Misses.fetch_add(1, std::memory_order_relaxed);
}

ObjectCacheStats ObjectCache::stats() const {
  ObjectCacheStats S;
  S.Hits = Hits.load(std::memory_order_relaxed);
  S.Misses = Misses.load(std::memory_order_relaxed);
  S.Rejected = Rejected.load(std::memory_order_relaxed);
  S.Stores = Stores.load(std::memory_order_relaxed);
  S.StoreErrors = StoreErrors.load(std::memory_order_relaxed);
  return S;
}

} // namespace guardjit
