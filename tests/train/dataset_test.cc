#include "weft/train/dataset.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
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

// train.validation_documents: that many documents, the middles of equal
// stretches, leave the training corpus for the validation one; the
// tokenizer is the one all documents train (the same as without validation).
TEST_F(DatasetTest, ValidationDocumentsAreHeldOutOfTraining) {
  EXPECT_EQ(HeldOutDocuments(60, 3), (std::vector<int64_t>{10, 30, 50}));
  EXPECT_EQ(HeldOutDocuments(1189, 4), (std::vector<int64_t>{148, 445, 743, 1040}));
  EXPECT_EQ(HeldOutDocuments(5, 4), (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(HeldOutDocuments(7, 0), std::vector<int64_t>{});
  std::mt19937_64 rng(2);
  std::string toml = std::string(kModel) + "[data]\nsource = \"inline\"\ndocuments = [\n";
  std::vector<std::string> texts;
  for (int d = 0; d < 12; ++d) {
    texts.push_back(RandomText(rng, 30 + static_cast<int>(rng() % 40)));
    toml += "\"\"\"" + texts.back() + "\"\"\",\n";
  }
  toml += "]\n";
  const RunConfig plain_config = ParseRunConfig(toml, "inline.toml");
  RunConfig config = plain_config;
  config.train.validation_documents = 3;  // documents 2, 6 and 10
  const Dataset plain = LoadDataset(plain_config, dir_);
  EXPECT_EQ(plain.validation, nullptr);
  EXPECT_TRUE(plain.validation_documents.empty());
  const Dataset dataset = LoadDataset(config, dir_);
  ASSERT_EQ(dataset.validation_documents.size(), 3u);
  ASSERT_NE(dataset.validation, nullptr);
  EXPECT_EQ(dataset.validation->num_documents(), 3);
  std::vector<std::string> held, trained;
  for (const Document& d : dataset.validation_documents) held.push_back(d.name);
  for (const Document& d : dataset.documents) trained.push_back(d.name);
  EXPECT_EQ(held, (std::vector<std::string>{"inline#3", "inline#7", "inline#11"}));
  EXPECT_EQ(trained.size(), 9u);
  for (const std::string& name : held) {
    EXPECT_EQ(std::find(trained.begin(), trained.end(), name), trained.end()) << name;
  }
  EXPECT_EQ(dataset.corpus->num_documents(), 9);
  EXPECT_EQ(dataset.tokenizer.serialized_model(), plain.tokenizer.serialized_model());
  // The corpora hold exactly their documents' tokens.
  auto ids = dataset.validation->document(1);
  EXPECT_EQ(dataset.tokenizer.Decode(ids.subspan(1, ids.size() - 2)), texts[6]);
  ids = dataset.corpus->document(2);  // the third trained: inline#4
  EXPECT_EQ(dataset.tokenizer.Decode(ids.subspan(1, ids.size() - 2)), texts[3]);
  EXPECT_EQ(dataset.corpus->num_tokens() + dataset.validation->num_tokens(),
            plain.corpus->num_tokens());

  config.train.validation_documents = 12;
  try {
    LoadDataset(config, dir_);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inline.toml: train.validation_documents = 12 holds out "
                                         "every one of the 12 documents"),
              std::string::npos)
        << e.what();
  }
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
