// Bounded, type-checked file reads (core/read_file.h) and MappedFile's type check before open()
// (/dev/zero is refused rather than read without bound; a FIFO shard is refused before open() can block).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/read_file.h"

using namespace k3;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::filesystem::path temp_path(const char* name) {
  return std::filesystem::temp_directory_path() /
         (std::string("k3-readfile-") + std::to_string(::getpid()) + "-" + name);
}

}  // namespace

TEST(ReadFile, RegularFileAndLimit) {
  const auto p = temp_path("reg");
  std::ofstream(p) << "0123456789";
  EXPECT_EQ(read_file_bounded(p, "-f/--file"), "0123456789");
  ReadLimits l;
  l.max_bytes = 9;
  l.limit_flag = "--max-input-mib";
  const std::string m = error_of([&] { read_file_bounded(p, "-f/--file", l); });
  EXPECT_NE(m.find("-f/--file: '" + p.string() +
                   "' is 10 bytes, larger than the limit of 9 bytes; raise it with --max-input-mib"),
            std::string::npos)
      << m;
  l.max_bytes = 10;
  EXPECT_EQ(read_file_bounded(p, "-f/--file", l), "0123456789");
  std::filesystem::remove(p);
  EXPECT_NE(
      error_of([&] { read_file_bounded(p, "config.json"); }).find("config.json: cannot open '" + p.string() + "'"),
      std::string::npos);
}

TEST(ReadFile, DevicesAndDirectoriesRefusedByType) {
  // /dev/zero and /dev/urandom never end: refused before a byte is read
  for (const char* dev : {"/dev/zero", "/dev/urandom"}) {
    ReadLimits l;
    l.allow_pipe = true;
    const std::string m = error_of([&] { read_file_bounded(dev, "-f/--file", l); });
    EXPECT_NE(m.find(std::string("-f/--file: '") + dev + "' is a character device, expected a regular file or a pipe"),
              std::string::npos)
        << m;
  }
  EXPECT_NE(error_of([] { read_file_bounded("/tmp", "--ids-file"); }).find("is a directory, expected a regular file"),
            std::string::npos);
}

TEST(ReadFile, FifoRefusedWithoutBlockingUnlessPipesAllowed) {
  const auto p = temp_path("fifo");
  std::filesystem::remove(p);
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  // no writer: a plain open() would block forever
  const std::string m = error_of([&] { read_file_bounded(p, "tiktoken.model"); });
  EXPECT_NE(m.find("is a FIFO (named pipe), expected a regular file"), std::string::npos) << m;
  const std::string mm = error_of([&] { MappedFile f(p); });
  EXPECT_NE(mm.find(p.string() + ": is a FIFO (named pipe), expected a regular file"), std::string::npos) << mm;
  EXPECT_NE(error_of([&] { require_regular_file(p, "shard"); }).find("shard: '" + p.string() + "' is a FIFO"),
            std::string::npos);
  // allowed (user input such as -f <(cmd)): read up to the bound, then refused
  std::signal(SIGPIPE, SIG_IGN);  // the writer outlives the reader
  std::thread writer([&] {
    std::ofstream w(p, std::ios::binary);
    const std::string chunk(1 << 16, 'x');
    for (int i = 0; i < 64 && w; ++i) w << chunk;  // 4 MiB, more than the 1 MiB limit
  });
  ReadLimits l;
  l.allow_pipe = true;
  l.max_bytes = 1 << 20;
  const std::string pm = error_of([&] { read_file_bounded(p, "-f/--file", l); });
  EXPECT_NE(pm.find("is larger than the limit of 1048576 bytes (1 MiB)"), std::string::npos) << pm;
  writer.join();  // the writer ends on EPIPE once the reader has closed
  std::filesystem::remove(p);
}
