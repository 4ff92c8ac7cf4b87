// core/atomic_file.h: files written through a unique temporary file and a rename (a planted
// symlink is never followed, concurrent writers of one name never mix), directories others can
// write are refused, one process per locked directory; core/mapped_file.h: a file truncated
// while mapped ends the process with a message naming it (findings F8, F11, F13, F14, F20).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/mapped_file.h"

using namespace k3;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path p;
  TempDir() {
    char t[] = "/tmp/k3af-XXXXXX";
    p = ::mkdtemp(t);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(p, fs::perms::owner_all, ec);
    fs::remove_all(p, ec);
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<std::string> names_in(const fs::path& d) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(d)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST(AtomicFile, PlantedSymlinksAtTheOldTempNameAndTheFinalNameLeaveTheOutsideFileAlone) {
  TempDir outside, dir;
  const fs::path secret = outside.p / "secret";
  std::ofstream(secret) << "outside";
  fs::create_symlink(secret, dir.p / "state.bin.tmp");  // a fixed temporary name
  fs::create_symlink(secret, dir.p / "other.bin");      // the final name itself
  write_file_atomic(dir.p, "state.bin", "saved-1", "test");
  write_file_atomic(dir.p, "other.bin", "saved-2", "test");
  EXPECT_EQ(slurp(secret), "outside");
  EXPECT_EQ(slurp(dir.p / "state.bin"), "saved-1");
  EXPECT_FALSE(fs::is_symlink(dir.p / "other.bin"));  // the link was replaced, not followed
  EXPECT_EQ(slurp(dir.p / "other.bin"), "saved-2");
  EXPECT_TRUE(fs::is_symlink(dir.p / "state.bin.tmp"));
  EXPECT_EQ(names_in(dir.p), (std::vector<std::string>{"other.bin", "state.bin", "state.bin.tmp"}));
  struct stat st {};
  ASSERT_EQ(::stat((dir.p / "state.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(AtomicFile, NamesThatLeaveTheDirectoryAreRefused) {
  TempDir dir;
  for (const char* bad : {"", ".", "..", "a/b", "../x", "/etc/passwd"}) {
    const std::string m = error_of([&] { write_file_atomic(dir.p, bad, "x", "slot save"); });
    EXPECT_NE(m.find("slot save: '" + std::string(bad) + "' is not a plain file name"), std::string::npos) << m;
  }
  EXPECT_TRUE(names_in(dir.p).empty());
}

TEST(AtomicFile, UncommittedFileLeavesNothingBehind) {
  TempDir dir;
  write_file_atomic(dir.p, "keep", "old", "test");
  {
    AtomicFile f(dir.p, "keep", "test");
    f.write("new-but-abandoned", 17);
  }
  EXPECT_EQ(slurp(dir.p / "keep"), "old");
  EXPECT_EQ(names_in(dir.p), std::vector<std::string>{"keep"});
}

// Two writers save one name 100 times each while a reader checks every version it sees: each
// is one complete save (a header naming the writer and round, then that many bytes of it).
TEST(AtomicFile, ConcurrentWritersOfOneNameNeverLeaveAMixedFile) {
  TempDir dir;
  const auto content = [](int writer, int round) {
    std::string body(64 * 1024 + round * 97, static_cast<char>('A' + writer));
    return std::to_string(writer) + ":" + std::to_string(round) + ":" + std::to_string(body.size()) + "\n" + body;
  };
  const auto valid = [&](const std::string& s) {
    const size_t a = s.find(':'), b = s.find(':', a + 1), nl = s.find('\n');
    if (a == std::string::npos || b == std::string::npos || nl == std::string::npos) return false;
    return s == content(std::stoi(s.substr(0, a)), std::stoi(s.substr(a + 1, b - a - 1)));
  };
  write_file_atomic(dir.p, "slot.bin", content(0, 0), "test");
  std::atomic<bool> done{false};
  std::atomic<int> bad{0}, reads{0};
  std::thread reader([&] {
    while (!done.load()) {
      if (!valid(slurp(dir.p / "slot.bin"))) ++bad;
      ++reads;
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w)
    writers.emplace_back([&, w] {
      for (int r = 1; r <= 100; ++r) write_file_atomic(dir.p, "slot.bin", content(w, r), "test", /*durable=*/false);
    });
  for (auto& t : writers) t.join();
  done = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_TRUE(valid(slurp(dir.p / "slot.bin")));
  EXPECT_EQ(names_in(dir.p), std::vector<std::string>{"slot.bin"});  // no temporary file left
}

// RLIMIT_FSIZE with SIGXFSZ ignored makes write() fail with EFBIG, as a full disk fails with
// ENOSPC: the error names the file, the old file stays, no temporary file is left.
TEST(AtomicFile, WriteFailureIsAnErrorAndKeepsTheOldFile) {
  TempDir dir;
  write_file_atomic(dir.p, "s.bin", "old", "test");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit rl{4096, RLIM_INFINITY};
    ::setrlimit(RLIMIT_FSIZE, &rl);
    const std::string m =
        error_of([&] { write_file_atomic(dir.p, "s.bin", std::string(8192, 'x'), "sequence state"); });
    const bool ok = m.find("sequence state: cannot write '" + (dir.p / "s.bin").string() + "': File too large") !=
                    std::string::npos;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(slurp(dir.p / "s.bin"), "old");
  EXPECT_EQ(names_in(dir.p), std::vector<std::string>{"s.bin"});
}

TEST(PrivateDir, WorldWritableForeignOrNonDirectoryIsRefused) {
  TempDir dir;
  EXPECT_EQ(error_of([&] { check_private_dir(dir.p, "--slot-save-path"); }), "(no error)");
  for (mode_t m : {0777, 01777, 0703}) {
    ASSERT_EQ(::chmod(dir.p.c_str(), m), 0);
    const std::string e = error_of([&] { check_private_dir(dir.p, "--slot-save-path"); });
    EXPECT_NE(e.find("--slot-save-path: '" + dir.p.string() + "' is writable by every user"), std::string::npos) << e;
  }
  ASSERT_EQ(::chmod(dir.p.c_str(), 0755), 0);
  EXPECT_EQ(error_of([&] { check_private_dir(dir.p, "--cache-dir"); }), "(no error)");
  // Created when absent, private.
  const fs::path fresh = dir.p / "a" / "b";
  EXPECT_EQ(error_of([&] { check_private_dir(fresh, "--cache-dir"); }), "(no error)");
  EXPECT_EQ(fs::status(fresh).permissions() & fs::perms::all, fs::perms::owner_all);
  std::ofstream(dir.p / "file") << "x";
  EXPECT_NE(error_of([&] { check_private_dir(dir.p / "file", "--cache-dir"); }).find("is not a directory"),
            std::string::npos);
  if (::geteuid() == 0) {  // another owner can be set up only as root
    ASSERT_EQ(::chown(fresh.c_str(), 65534, 65534), 0);
    const std::string e = error_of([&] { check_private_dir(fresh, "--cache-dir"); });
    EXPECT_NE(e.find("--cache-dir: '" + fresh.string() + "' is owned by uid 65534, not by this user"),
              std::string::npos)
        << e;
  }
}

TEST(DirLock, SecondLockOnADirectoryIsRefusedUntilTheFirstEnds) {
  TempDir dir;
  {
    DirLock a(dir.p, "--cache-dir");
    const std::string e = error_of([&] { DirLock b(dir.p, "--cache-dir"); });
    EXPECT_NE(e.find("--cache-dir: '" + dir.p.string() + "' is in use by another k3 process"), std::string::npos) << e;
    // Another process too.
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string m = error_of([&] { DirLock c(dir.p, "--cache-dir"); });
      ::_exit(m.find("in use by another k3 process") != std::string::npos ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(error_of([&] { DirLock c(dir.p, "--cache-dir"); }), "(no error)");
  EXPECT_TRUE(names_in(dir.p).empty());  // the lock is on the directory itself: no lock file
}

// A mapped file truncated under the reader: the access raises SIGBUS, the handler names the
// file and the byte, and the process ends by SIGBUS (never continues with bad data).
void read_after_truncation(const fs::path& p) {
  rlimit no_core{};
  ::setrlimit(RLIMIT_CORE, &no_core);  // the child's death leaves no core file behind
  MappedFile m(p);
  fs::resize_file(p, 0);
  volatile uint8_t x = m.data()[2 * 4096 + 5];
  (void)x;
  std::fprintf(stderr, "read past the end without a fault\n");
  std::exit(0);
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

TEST(MappedFileDeathTest, TruncatedWhileMappedNamesTheFile) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir dir;
  const fs::path p = dir.p / "shard.safetensors";
  std::ofstream(p, std::ios::binary) << std::string(3 * 4096, 'w');
  // Under AddressSanitizer its own SIGBUS handler runs after k3's message and aborts.
  const auto ended_by_the_fault = [](int status) {
    return WIFSIGNALED(status) && (WTERMSIG(status) == SIGBUS || (kAddressSanitizer && WTERMSIG(status) == SIGABRT));
  };
  EXPECT_EXIT(read_after_truncation(p), ended_by_the_fault,
              "SIGBUS reading '.*shard\\.safetensors' at byte 8197 of the 12288 it had");
}
