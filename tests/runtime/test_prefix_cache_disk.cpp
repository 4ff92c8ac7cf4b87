// The prefix cache's disk tier as a file writer (findings F8, F13, F20): a directory others can
// write is refused, one process per directory (the second is refused), writes go through a
// unique temporary file (a planted symlink is replaced, never followed; stale temporary files
// of a crashed writer are removed), and a full disk is reported once, counted, and survived.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/prefix_cache_disk.h"

namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path p;
  TempDir() {
    char t[] = "/tmp/k3pcd-XXXXXX";
    p = ::mkdtemp(t);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(p, fs::perms::owner_all, ec);
    fs::remove_all(p, ec);
  }
};

constexpr int64_t kBlock = 64;

k3::DiskBlock block(uint64_t key) {
  k3::DiskBlock b;
  b.key = key;
  b.parent = key - 1;
  b.index = 0;
  b.ids.assign(kBlock, 7);
  b.mla.assign(4096, 0.5f);  // 16 KiB payload
  return b;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const k3::Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST(PrefixCacheDisk, WorldWritableOrForeignDirectoryIsRefused) {
  TempDir d;
  ASSERT_EQ(::chmod(d.p.c_str(), 0777), 0);
  std::string e = error_of([&] { k3::PrefixCacheDisk c(d.p, 1 << 20, "fp", kBlock); });
  EXPECT_NE(e.find("--cache-dir: '" + d.p.string() + "' is writable by every user"), std::string::npos) << e;
  ASSERT_EQ(::chmod(d.p.c_str(), 0700), 0);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(d.p.c_str(), 65534, 65534), 0);
    e = error_of([&] { k3::PrefixCacheDisk c(d.p, 1 << 20, "fp", kBlock); });
    EXPECT_NE(e.find("--cache-dir: '" + d.p.string() + "' is owned by uid 65534"), std::string::npos) << e;
    ASSERT_EQ(::chown(d.p.c_str(), 0, 0), 0);
  }
  EXPECT_EQ(error_of([&] { k3::PrefixCacheDisk c(d.p, 1 << 20, "fp", kBlock); }), "(no error)");
}

TEST(PrefixCacheDisk, SecondUserOfOneDirectoryIsRefused) {
  TempDir d;
  auto a = std::make_unique<k3::PrefixCacheDisk>(d.p, 1 << 20, "fp", kBlock);
  const std::string e = error_of([&] { k3::PrefixCacheDisk b(d.p, 1 << 20, "fp", kBlock); });
  EXPECT_NE(e.find("--cache-dir: '" + d.p.string() + "' is in use by another k3 process"), std::string::npos) << e;
  a.reset();
  EXPECT_EQ(error_of([&] { k3::PrefixCacheDisk b(d.p, 1 << 20, "fp", kBlock); }), "(no error)");
}

TEST(PrefixCacheDisk, PlantedSymlinkIsReplacedAndStaleTemporariesRemoved) {
  TempDir d, outside;
  const fs::path secret = outside.p / "secret";
  std::ofstream(secret) << "outside";
  fs::create_symlink(secret, d.p / "000000000000002a.k3pc");
  std::ofstream(d.p / ".000000000000002b.k3pc.abcdefghijkl") << "half-written";
  std::ofstream(d.p / "unrelated.txt") << "kept";
  k3::PrefixCacheDisk c(d.p, 1 << 20, "fp", kBlock);
  EXPECT_FALSE(fs::exists(d.p / ".000000000000002b.k3pc.abcdefghijkl"));
  EXPECT_TRUE(fs::exists(d.p / "unrelated.txt"));
  EXPECT_TRUE(c.write(block(42)));
  EXPECT_EQ(slurp(secret), "outside");
  EXPECT_FALSE(fs::is_symlink(d.p / "000000000000002a.k3pc"));
  const auto r = c.read(42, 4096, 0);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->mla, block(42).mla);
}

// A full disk (here RLIMIT_FSIZE with SIGXFSZ ignored: write() fails with EFBIG, as ENOSPC does)
// while blocks are written: one line on stderr for all of them, every failure counted, nothing
// half-written left, and writing works again once there is room.
TEST(PrefixCacheDisk, WriteFailuresAreLoggedOnceCountedAndSurvived) {
  TempDir d;
  const fs::path log = d.p.parent_path() / (d.p.filename().string() + ".stderr");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::FILE* f = std::freopen(log.c_str(), "w", stderr);
    if (!f) ::_exit(10);
    std::signal(SIGXFSZ, SIG_IGN);
    k3::PrefixCacheDisk c(d.p, 1 << 30, "fp", kBlock);
    rlimit rl{}, tight{};
    ::getrlimit(RLIMIT_FSIZE, &rl);
    tight = rl;
    tight.rlim_cur = 4096;
    ::setrlimit(RLIMIT_FSIZE, &tight);
    for (uint64_t k = 1; k <= 5; ++k)
      if (c.write(block(k))) ::_exit(11);
    if (c.write_failures() != 5 || c.files() != 0 || c.bytes() != 0) ::_exit(12);
    ::setrlimit(RLIMIT_FSIZE, &rl);
    if (!c.write(block(6)) || c.files() != 1 || !c.read(6, 4096, 0)) ::_exit(13);
    std::fflush(stderr);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const std::string err = slurp(log);
  fs::remove(log);
  size_t lines = 0;
  for (size_t i = err.find("k3: prefix cache:"); i != std::string::npos; i = err.find("k3: prefix cache:", i + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << err;
  EXPECT_NE(err.find("File too large"), std::string::npos) << err;
  EXPECT_NE(err.find("reported once"), std::string::npos) << err;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(d.p)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"0000000000000006.k3pc"});
}

// A block file of the older layout ("K3PCBLK1": u32 header length) or of another kind is a miss:
// one line to the cache's log naming the file, the format found and the one expected, a count
// in rejected(), and the file removed. A current file reads back without a line.
TEST(PrefixCacheDisk, OldFormatFilesAreMissesLoggedAndCounted) {
  TempDir d;
  std::vector<std::string> lines;
  auto log = [&](const std::string& l) { lines.push_back(l); };
  {
    k3::PrefixCacheDisk c(d.p, 1 << 30, "fp", kBlock, log);
    ASSERT_TRUE(c.write(block(5)));
  }
  const fs::path good = d.p / "0000000000000005.k3pc";
  ASSERT_EQ(slurp(good).substr(0, 8), "K3PCBLK2");
  const std::string header = R"({"format":"k3-prefix-block","version":1})";
  std::string old = "K3PCBLK1";
  const uint32_t hl = static_cast<uint32_t>(header.size());
  old.append(reinterpret_cast<const char*>(&hl), 4);
  old += header + std::string(4, '\0');
  std::ofstream(d.p / "0000000000000007.k3pc", std::ios::binary) << old;
  std::ofstream(d.p / "0000000000000008.k3pc", std::ios::binary) << "K3SEQST1" << std::string(40, '\0');
  k3::PrefixCacheDisk c(d.p, 1 << 30, "fp", kBlock, log);
  ASSERT_TRUE(c.read(5, 4096, 0).has_value());
  EXPECT_TRUE(lines.empty());
  EXPECT_FALSE(c.read(7, 4096, 0).has_value());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("k3: prefix cache: ignoring '" + (d.p / "0000000000000007.k3pc").string() + "'"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find("found \"K3PCBLK1\", a k3 prefix-cache block of format 1"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("expected \"K3PCBLK2\""), std::string::npos) << lines[0];
  EXPECT_FALSE(c.read(8, 4096, 0).has_value());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("found \"K3SEQST1\", a k3 sequence-state file"), std::string::npos) << lines[1];
  EXPECT_EQ(c.rejected(), 2u);
  EXPECT_FALSE(fs::exists(d.p / "0000000000000007.k3pc"));
  EXPECT_FALSE(c.contains(8));
}
