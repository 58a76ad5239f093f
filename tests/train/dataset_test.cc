#include "weft/train/dataset.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <random>

#include "scratch_dir.h"
#include "weft/base/atomic_file.h"
#include "weft/base/error.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModel = R"([model]
vocab_size = 300
dim = 32
n_layers = 1
n_heads = 2
ffn_dim = 64
seq_len = 24
[train]
steps = 5
batch_size = 2
warmup_steps = 1
seed = 3
)";

std::string RandomText(std::mt19937_64& rng, int words) {
  static const char* kWords[] = {"and", "the",  "light", "was",   "good",   "day",  "night",
                                 "god", "said", "earth", "water", "heaven", "form", "void"};
  std::string text;
  for (int i = 0; i < words; ++i) {
    text += i == 0 ? "" : (rng() % 9 == 0 ? "\n" : " ");
    text += kWords[rng() % std::size(kWords)];
  }
  return text;
}

class DatasetTest : public ::testing::Test {
 protected:
  weft::testing::ScratchDir scratch_{"weft_dataset"};
  const fs::path dir_ = scratch_.path();
};

TEST_F(DatasetTest, InlineDocumentsBecomeBatches) {
  std::mt19937_64 rng(1);
  std::string toml = std::string(kModel) + "[data]\nsource = \"inline\"\ndocuments = [\n";
  std::vector<std::string> texts;
  for (int d = 0; d < 30; ++d) {
    texts.push_back(RandomText(rng, 20 + static_cast<int>(rng() % 60)));
    toml += "\"\"\"" + texts.back() + "\"\"\",\n";
  }
  toml += "]\nmax_documents = 25\n";
  RunConfig config = ParseRunConfig(toml, "inline.toml");
  Dataset dataset = LoadDataset(config, dir_);
  ASSERT_EQ(dataset.documents.size(), 25u);
  EXPECT_EQ(dataset.documents[4].name, "inline#5");
  EXPECT_EQ(dataset.documents[4].text, texts[4]);
  EXPECT_EQ(dataset.tokenizer.vocab_size(), 300);
  EXPECT_EQ(dataset.corpus->num_documents(), 25);
  // Each document decodes back from its framed tokens.
  auto ids = dataset.corpus->document(7);
  EXPECT_EQ(ids.front(), Tokenizer::kBosId);
  EXPECT_EQ(ids.back(), Tokenizer::kEosId);
  EXPECT_EQ(dataset.tokenizer.Decode(ids.subspan(1, ids.size() - 2)), texts[7]);

  BatchIterator batches = MakeBatchIterator(dataset, config);
  int steps = 0;
  while (batches.HasNext()) {
    Batch batch = batches.Next();
    EXPECT_EQ(batch.batch_size, 2);
    EXPECT_EQ(batch.seq_len, 24);
    ++steps;
  }
  EXPECT_EQ(steps, 5);
  // A second load finds the tokenizer in the cache.
  EXPECT_TRUE(LoadDataset(config, dir_).tokenizer.loaded_from_cache());
}

TEST_F(DatasetTest, FilesSplitOnBlankLines) {
  std::mt19937_64 rng(2);
  std::string a = RandomText(rng, 200) + "\n\n" + RandomText(rng, 150);
  std::string b = RandomText(rng, 300);
  WriteFileAtomically(dir_ / "a.txt", a);
  WriteFileAtomically(dir_ / "b.txt", b);
  std::string toml = std::string(kModel) +
                     "[data]\nsource = \"files\"\nfiles = [\"a.txt\", \"b.txt\"]\n"
                     "split_on_blank_lines = true\n";
  RunConfig config = ParseRunConfig(toml, "files.toml", dir_);
  auto documents = LoadConfiguredDocuments(config.data);
  ASSERT_EQ(documents.size(), 3u);
  EXPECT_EQ(documents[2].text, b);
  Dataset dataset = LoadDataset(config, dir_);
  EXPECT_EQ(dataset.corpus->num_documents(), 3);
}

TEST_F(DatasetTest, ErrorsNameTheProblem) {
  std::string toml = std::string(kModel) + "[data]\nsource = \"files\"\nfiles = [\"nope.txt\"]\n";
  RunConfig config = ParseRunConfig(toml, "files.toml", dir_);
  try {
    LoadDataset(config, dir_);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("nope.txt"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace weft
