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

// A rank killed by a signal under Python's faulthandler (torch's elastic wrapper enables it): the
// error is the fatal line and the crashing thread's innermost frame, not the last line with
// "error" in it, which is a frame of torch/distributed/elastic/multiprocessing/errors/.
TEST_F(TailOfFile, ARankKilledUnderPythonsFaulthandlerIsQuotedByItsFatalLineAndInnermostFrame) {
  file(
      "[titan] Training starts at step 1\n"
      "Fatal Python error: Segmentation fault\n"
      "\n"
      "Current thread 0x00007f1c695df6c0 (most recent call first):\n"
      "  File \"/torch/distributed/distributed_c10d.py\", line 4652 in reduce_scatter_tensor\n"
      "  File \"/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py\", line 544 in foreach_reduce\n"
      "\n"
      "Thread 0x00007f1f77323140 (most recent call first):\n"
      "  File \"/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 362 in wrapper\n"
      "  File \"/torchtitan/train.py\", line 55 in main\n"
      "\n"
      "Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)\n");
  EXPECT_EQ(rank_error_message(dir_, 0),
            "Fatal Python error: Segmentation fault (innermost: File \"/torch/distributed/distributed_c10d.py\", "
            "line 4652 in reduce_scatter_tensor)");
}

TEST_F(TailOfFile, ATracebacksFramePathsDoNotNameItsError) {
  file(
      "Traceback (most recent call last):\n"
      "  File \"/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 362, in wrapper\n"
      "    return f(*args, **kwargs)\n"
      "RuntimeError: Missing key in checkpoint state_dict: layers.0.attention.wk.weight.\n"
      "  File \"/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 362, in wrapper\n");
  EXPECT_EQ(rank_error_message(dir_, 0),
            "RuntimeError: Missing key in checkpoint state_dict: layers.0.attention.wk.weight.");
  // As torch prefixes a rank's uncaught exception.
  file(
      "[rank1]: RuntimeError: Missing key in checkpoint state_dict: layers.0.attention.wk.weight.\n"
      "[rank1]:   File \"/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 362, in wrapper\n");
  EXPECT_EQ(rank_error_message(dir_, 0),
            "[rank1]: RuntimeError: Missing key in checkpoint state_dict: layers.0.attention.wk.weight.");
}

// The same with the line endings a pseudo-terminal leaves (trailing spaces and a carriage
// return): the quoted lines are trimmed at both ends.
TEST_F(TailOfFile, TheFatalLineAndFrameAreTrimmedAtBothEnds) {
  file(
      "Fatal Python error: Aborted  \r\n"
      "Current thread 0x00007f1c695df6c0 (most recent call first):\n"
      "  File \"/x.py\", line 3 in f  \r\n");
  EXPECT_EQ(rank_error_message(dir_, 0), "Fatal Python error: Aborted (innermost: File \"/x.py\", line 3 in f)");
}

// Who a hung phase waits for, from collective files as the trainer writes them: one line padded
// with spaces to its fixed width. A stale file of a rank beyond the phase's (an earlier, wider
// attempt in the same folder) is not read.
TEST_F(TailOfFile, RanksNotArrivedReadsPaddedCollectiveLines) {
  auto collective = [&](int rank, const std::string& text) {
    std::string line = text;
    line.resize(127, ' ');
    std::ofstream(rank_collective_file(dir_, rank), std::ios::binary) << line << '\n';
  };
  collective(0, "collectives_entered=10 last=all_reduce_sum group=dp ranks=3");
  collective(1, "collectives_entered=9 last=all_gather group=dp ranks=3");
  collective(2, "collectives_entered=10 last=all_reduce_sum group=dp ranks=3");
  collective(3, "collectives_entered=50 last=broadcast group=world ranks=4");
  int behind = -1;
  EXPECT_EQ(
      ranks_not_arrived(dir_, 3, &behind),
      "rank 1 did not arrive: ranks 0,2 wait in collective #10 (all_reduce_sum group=dp ranks=3); rank 1 entered 9");
  EXPECT_EQ(behind, 1);
  // Of two ranks, the one that waits is one rank: "waits".
  collective(0, "collectives_entered=3 last=broadcast group=world ranks=2");
  collective(1, "collectives_entered=2 last=all_gather group=world ranks=2");
  EXPECT_EQ(ranks_not_arrived(dir_, 2, &behind),
            "rank 1 did not arrive: rank 0 waits in collective #3 (broadcast group=world ranks=2); rank 1 entered 2");
}
