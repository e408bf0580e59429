// tail_of_file, which every failure report reads logs through (JUnit system-out, the HTML's
// log tail, the error line of a crashed rank): the last lines exactly, a bounded read, and
// "" without blocking for anything that is not a regular file.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "readers/rank_files.h"

namespace fs = std::filesystem;
using namespace meshtest;

namespace {

class TailOfFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-tail-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& bytes) {
    const std::string path = dir_ + "/rank0.log";
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  std::string dir_;
};

}  // namespace

TEST_F(TailOfFile, TheLastLinesExactly) {
  EXPECT_EQ(tail_of_file(file("a\nb\nc\n"), 2), "b\nc\n");
  EXPECT_EQ(tail_of_file(file("a\nb\nc"), 2), "b\nc");   // no final newline
  EXPECT_EQ(tail_of_file(file("a\nb\n"), 5), "a\nb\n");  // fewer lines than asked: all
  EXPECT_EQ(tail_of_file(file("\nx\n"), 1), "x\n");      // the newline before the line is at byte 0
  EXPECT_EQ(tail_of_file(file("\nx\n"), 2), "\nx\n");    // an empty first line is a line
  EXPECT_EQ(tail_of_file(file(""), 3), "");
}

TEST_F(TailOfFile, ReadsAtMostMaxBytesFromTheEnd) {
  const std::string tail = tail_of_file(file(std::string(1 << 20, 'x') + "\nlast\n"), 1000, 100);
  EXPECT_EQ(tail.size(), 100u);
  EXPECT_EQ(tail.substr(tail.size() - 6), "\nlast\n");
}

TEST_F(TailOfFile, NothingButRegularFiles) {
  EXPECT_EQ(tail_of_file(dir_ + "/gone.log", 5), "");
  EXPECT_EQ(tail_of_file(dir_, 5), "");
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(tail_of_file(fifo, 5), "");  // opening it would wait for a writer forever
}
