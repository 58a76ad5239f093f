#include "weft/data/corpus.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <random>

#include "error_of.h"
#include "scratch_dir.h"
#include "weft/base/atomic_file.h"
#include "weft/base/error.h"

namespace weft {
namespace {

using weft::testing::ErrorOf;

namespace fs = std::filesystem;

std::string EncodeUtf8(uint32_t code) {
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

std::string RandomUtf8(std::mt19937_64& rng, int num_chars) {
  std::string text;
  for (int i = 0; i < num_chars; ++i) {
    uint32_t code = 0;
    switch (rng() % 4) {
      case 0:
        code = 0x20 + rng() % 0x5F;
        break;
      case 1:
        code = 0x80 + rng() % (0x800 - 0x80);
        break;
      case 2:
        code = 0x800 + rng() % (0xD800 - 0x800);
        break;
      default:
        code = 0x10000 + rng() % (0x110000 - 0x10000);
        break;
    }
    text += EncodeUtf8(code);
  }
  return text;
}

TEST(CheckUtf8, AcceptsRandomWellFormedText) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text = RandomUtf8(rng, 1 + static_cast<int>(rng() % 64));
    EXPECT_NO_THROW(CheckUtf8(text, "random")) << trial;
  }
  EXPECT_NO_THROW(CheckUtf8("", "empty"));
}

TEST(CheckUtf8, RejectsMalformedSequencesAtTheirOffset) {
  struct Case {
    std::string bytes;
    size_t offset;
  };
  const Case cases[] = {
      {"ab\x80", 2},                      // lone continuation byte
      {"abc\xC3", 3},                     // truncated 2-byte sequence
      {"a\xE2\x82", 1},                   // truncated 3-byte sequence
      {"xy\xC0\x80", 2},                  // overlong NUL
      {"\xE0\x80\xAF", 0},                // overlong '/'
      {"ok\xED\xA0\x80", 2},              // UTF-16 surrogate
      {"\xF4\x90\x80\x80", 0},            // above U+10FFFF
      {"hello \xF8\x88\x80\x80\x80", 6},  // 5-byte form
      {"\xC3\xA9\xC3(", 2},               // continuation missing
  };
  for (const auto& c : cases) {
    std::string message = ErrorOf([&] { CheckUtf8(c.bytes, "notes.txt"); });
    EXPECT_NE(message.find("notes.txt"), std::string::npos) << message;
    EXPECT_NE(message.find("byte offset " + std::to_string(c.offset)), std::string::npos)
        << message;
  }
}

TEST(SplitOnBlankLines, SplitsAtRunsOfBlankLines) {
  auto paragraphs = SplitOnBlankLines("\n\nfirst line\nsecond\n\n \t\n\nthird\r\n\r\nlast");
  ASSERT_EQ(paragraphs.size(), 3u);
  EXPECT_EQ(paragraphs[0], "first line\nsecond");
  EXPECT_EQ(paragraphs[1], "third\r");
  EXPECT_EQ(paragraphs[2], "last");
  EXPECT_TRUE(SplitOnBlankLines(" \n\n\t\n").empty());
}

class LoadTextFilesTest : public ::testing::Test {
 protected:
  weft::testing::ScratchDir scratch_{"weft_corpus"};
  const fs::path dir_ = scratch_.path();
};

TEST_F(LoadTextFilesTest, OneDocumentPerFileOrPerParagraph) {
  std::mt19937_64 rng(5);
  std::string a = RandomUtf8(rng, 40) + "\n\n" + RandomUtf8(rng, 30) + "\n";
  std::string b = RandomUtf8(rng, 25);
  WriteFileAtomically(dir_ / "a.txt", a);
  WriteFileAtomically(dir_ / "b.txt", b);
  WriteFileAtomically(dir_ / "empty.txt", "");
  std::vector<fs::path> paths = {dir_ / "a.txt", dir_ / "empty.txt", dir_ / "b.txt"};

  auto whole = LoadTextFiles(paths);
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0].text, a);
  EXPECT_EQ(whole[0].name, (dir_ / "a.txt").string());
  EXPECT_EQ(whole[1].text, b);

  auto split = LoadTextFiles(paths, {.split_on_blank_lines = true});
  ASSERT_EQ(split.size(), 3u);
  EXPECT_EQ(split[0].text + "\n\n" + split[1].text + "\n", a);
  EXPECT_EQ(split[1].name, (dir_ / "a.txt").string() + "#2");
  EXPECT_EQ(split[2].text, b);
}

TEST_F(LoadTextFilesTest, ErrorsNameTheFile) {
  WriteFileAtomically(dir_ / "latin1.txt", "caf\xE9 au lait");
  std::vector<fs::path> bad = {dir_ / "latin1.txt"};
  std::string message = ErrorOf([&] { LoadTextFiles(bad); });
  EXPECT_NE(message.find("latin1.txt"), std::string::npos) << message;
  EXPECT_NE(message.find("byte offset 3"), std::string::npos) << message;

  std::vector<fs::path> missing = {dir_ / "missing.txt"};
  message = ErrorOf([&] { LoadTextFiles(missing); });
  EXPECT_NE(message.find("missing.txt"), std::string::npos) << message;

  std::vector<fs::path> directory = {dir_};
  message = ErrorOf([&] { LoadTextFiles(directory); });
  EXPECT_NE(message.find("is a directory"), std::string::npos) << message;

  // A device would be read without end; a sparse file of 2 GiB whole.
  std::vector<fs::path> device = {"/dev/zero"};
  message = ErrorOf([&] { LoadTextFiles(device); });
  EXPECT_NE(message.find("text file /dev/zero is a character device"), std::string::npos)
      << message;
  WriteFileAtomically(dir_ / "sparse.txt", "x");
  fs::resize_file(dir_ / "sparse.txt", int64_t{2} << 30);
  std::vector<fs::path> sparse = {dir_ / "sparse.txt"};
  message = ErrorOf([&] { LoadTextFiles(sparse); });
  EXPECT_NE(message.find("sparse.txt is 2.00 GiB (2147483648 bytes), more than the 1.00 GiB"),
            std::string::npos)
      << message;
}

// CheckTextFiles refuses what LoadTextFiles would, with the same messages,
// without reading: the files may be read much later (after a model).
TEST_F(LoadTextFilesTest, CheckTextFilesRefusesTheSameWithoutReading) {
  WriteFileAtomically(dir_ / "good.txt", "in the beginning");
  WriteFileAtomically(dir_ / "sparse.txt", "x");
  fs::resize_file(dir_ / "sparse.txt", int64_t{2} << 30);
  for (const fs::path& bad :
       {dir_ / "missing.txt", dir_, fs::path("/dev/zero"), dir_ / "sparse.txt"}) {
    const std::vector<fs::path> paths = {dir_ / "good.txt", bad};
    const std::string checked = ErrorOf([&] { CheckTextFiles(paths); });
    EXPECT_NE(checked.find(bad.string()), std::string::npos) << checked;
    EXPECT_EQ(checked, ErrorOf([&] { LoadTextFiles(paths); }));
  }
  const std::vector<fs::path> good = {dir_ / "good.txt"};
  EXPECT_NO_THROW(CheckTextFiles(good));
  // Not UTF-8 is found only by reading: LoadTextFiles' to refuse.
  WriteFileAtomically(dir_ / "latin1.txt", "caf\xE9");
  const std::vector<fs::path> latin1 = {dir_ / "latin1.txt"};
  EXPECT_NO_THROW(CheckTextFiles(latin1));
}

}  // namespace
}  // namespace weft
