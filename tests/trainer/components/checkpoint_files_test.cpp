// DurableFile writes through staging buffers and writer threads: what lands on disk is exactly
// what was appended, in order, whatever the append sizes, on a disk (O_DIRECT) and on tmpfs
// (through the page cache).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include "components/checkpoint_files.h"

using namespace meshtrain::checkpoint_files;
namespace fs = std::filesystem;

namespace {

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Appends `total` random bytes in pieces of awkward sizes (1 byte to past a staging buffer).
void expect_written_exactly(const fs::path& folder, size_t total) {
  fs::create_directories(folder);
  const fs::path path = folder / ("durable_" + std::to_string(::getpid()));
  std::mt19937_64 random(7);
  std::string expected(total, '\0');
  for (auto& c : expected) c = static_cast<char>(random());
  {
    DurableFile file(path.string());
    const size_t pieces[] = {1, 4095, 4097, 40 << 20, 3, 1 << 20};
    size_t at = 0;
    for (int i = 0; at < total; ++i) {
      const size_t n = std::min(pieces[i % 6], total - at);
      file.append(expected.data() + at, n);
      at += n;
      EXPECT_EQ(file.size(), static_cast<int64_t>(at));
    }
    file.sync_and_close();
  }
  EXPECT_EQ(fs::file_size(path), total) << path;
  EXPECT_TRUE(bytes_of(path) == expected) << path << ": the bytes differ from those appended";
  fs::remove(path);
}

}  // namespace

TEST(DurableFile, WritesExactlyWhatWasAppendedOnADisk) {
  expect_written_exactly(fs::temp_directory_path(), (70 << 20) + 12345);  // past two staging buffers
  expect_written_exactly(fs::temp_directory_path(), 100);                 // a tail alone
  expect_written_exactly(fs::temp_directory_path(), 0);
}

TEST(DurableFile, WritesExactlyWhatWasAppendedOnTmpfs) {
  if (!fs::exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  expect_written_exactly("/dev/shm", (70 << 20) + 12345);
}

TEST(DurableFile, AFolderThatIsNotThereNamesTheFile) {
  try {
    DurableFile file("/nonexistent-folder/x.distcp");
    FAIL() << "created a file in a folder that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "checkpoint: cannot create '/nonexistent-folder/x.distcp': No such file or directory");
  }
}
