#include "weft/data/tokenizer.h"

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

constexpr int kVocab = 400;

// A small corpus of random sentences over a fixed word list: enough for BPE
// to learn merges, small enough to train in well under a second.
std::vector<Document> TinyCorpus(uint64_t seed, int num_documents = 12) {
  static const char* kWords[] = {"the",  "lord",  "said",  "unto",   "him",   "and", "light",
                                 "was",  "good",  "earth", "heaven", "water", "day", "night",
                                 "über", "naïve", "city",  "king",   "spake", "thee"};
  std::mt19937_64 rng(seed);
  std::vector<Document> documents;
  for (int d = 0; d < num_documents; ++d) {
    std::string text;
    for (int line = 0; line < 40; ++line) {
      int words = 3 + static_cast<int>(rng() % 9);
      for (int w = 0; w < words; ++w) {
        if (w > 0) text += ' ';
        text += kWords[rng() % std::size(kWords)];
      }
      text += rng() % 5 == 0 ? "\n\n" : ".\n";
    }
    documents.push_back({"doc" + std::to_string(d), text});
  }
  return documents;
}

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.vocab_size = kVocab;
    options_.cache_dir = dir_;
  }
  int CachedModels() const {
    int count = 0;
    for (const auto& entry : fs::recursive_directory_iterator(dir_)) {
      count += entry.is_regular_file();
    }
    return count;
  }
  weft::testing::ScratchDir scratch_{"weft_tokenizer"};
  const fs::path dir_ = scratch_.path();
  TokenizerOptions options_;
};

TEST_F(TokenizerTest, TrainsOnceThenLoadsFromTheCache) {
  auto corpus = TinyCorpus(1);
  Tokenizer first = Tokenizer::TrainOrLoad(corpus, options_);
  EXPECT_FALSE(first.loaded_from_cache());
  EXPECT_TRUE(fs::exists(first.cache_path()));
  EXPECT_EQ(first.cache_path().parent_path().parent_path(), dir_);
  EXPECT_EQ(first.vocab_size(), kVocab);

  Tokenizer second = Tokenizer::TrainOrLoad(corpus, options_);
  EXPECT_TRUE(second.loaded_from_cache());
  EXPECT_EQ(second.serialized_model(), first.serialized_model());
  EXPECT_EQ(CachedModels(), 1);

  // Another vocab size or another corpus is another cache entry.
  TokenizerOptions bigger = options_;
  bigger.vocab_size = kVocab + 8;
  EXPECT_FALSE(Tokenizer::TrainOrLoad(corpus, bigger).loaded_from_cache());
  EXPECT_FALSE(Tokenizer::TrainOrLoad(TinyCorpus(2), options_).loaded_from_cache());
  EXPECT_EQ(CachedModels(), 3);
}

TEST_F(TokenizerTest, CacheKeyCoversTextBoundariesAndOptions) {
  auto corpus = TinyCorpus(3);
  std::string key = TokenizerCacheKey(corpus, options_);
  EXPECT_EQ(key.size(), 16u);
  EXPECT_EQ(key, TokenizerCacheKey(TinyCorpus(3), options_));
  auto moved = corpus;
  moved[1].text = moved[0].text.substr(5) + moved[1].text;  // same bytes, other boundary
  moved[0].text.resize(5);
  EXPECT_NE(TokenizerCacheKey(moved, options_), key);
  TokenizerOptions fewer = options_;
  fewer.max_training_sentences = 10;
  EXPECT_NE(TokenizerCacheKey(corpus, fewer), key);
}

TEST_F(TokenizerTest, TrainingIsDeterministic) {
  auto corpus = TinyCorpus(4);
  options_.max_training_sentences = 200;  // exercises the seeded sampling
  EXPECT_EQ(Tokenizer::Train(corpus, options_).serialized_model(),
            Tokenizer::Train(corpus, options_).serialized_model());
}

TEST_F(TokenizerTest, DecodeInvertsEncodeOnArbitraryText) {
  Tokenizer tokenizer = Tokenizer::TrainOrLoad(TinyCorpus(5), options_);
  std::mt19937_64 rng(99);
  const std::string alphabet[] = {"a", "e",  "t",    "h",    " ",    "  ", "\n",   "\n\n", "\t",
                                  "é", "漢", "🙂", "the ", "lord", ".",  "\r\n", "ü"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    int length = static_cast<int>(rng() % 40);
    for (int i = 0; i < length; ++i) text += alphabet[rng() % std::size(alphabet)];
    auto ids = tokenizer.Encode(text);
    for (int32_t id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, tokenizer.vocab_size());
      ASSERT_NE(id, Tokenizer::kUnkId) << "byte fallback should cover every character";
    }
    ASSERT_EQ(tokenizer.Decode(ids), text) << "trial " << trial;
  }
}

TEST_F(TokenizerTest, LearnsMergesAndKeepsLineStartsConsistent) {
  Tokenizer tokenizer = Tokenizer::TrainOrLoad(TinyCorpus(6), options_);
  // Common words become one piece.
  auto ids = tokenizer.Encode("the lord said unto him");
  EXPECT_LE(ids.size(), 8u);
  // A word after a newline gets the same pieces as at the start of the text.
  auto alone = tokenizer.Encode("heaven");
  auto after_newline = tokenizer.Encode("x\nheaven");
  ASSERT_GT(after_newline.size(), alone.size());
  EXPECT_TRUE(std::equal(alone.rbegin(), alone.rend(), after_newline.rbegin()));
  EXPECT_EQ(tokenizer.piece(tokenizer.bos_id()), "<s>");
  EXPECT_EQ(tokenizer.piece(tokenizer.eos_id()), "</s>");
  EXPECT_EQ(tokenizer.piece(tokenizer.pad_id()), "<pad>");
}

TEST_F(TokenizerTest, ReplacesACorruptCacheEntry) {
  auto corpus = TinyCorpus(7);
  Tokenizer first = Tokenizer::TrainOrLoad(corpus, options_);
  WriteFileAtomically(first.cache_path(), "not a model");
  Tokenizer second = Tokenizer::TrainOrLoad(corpus, options_);
  EXPECT_FALSE(second.loaded_from_cache());
  EXPECT_EQ(ReadFileToString(first.cache_path()), first.serialized_model());
}

TEST_F(TokenizerTest, ClearErrors) {
  auto corpus = TinyCorpus(8);
  TokenizerOptions tiny = options_;
  tiny.vocab_size = 100;
  EXPECT_THROW(Tokenizer::Train(corpus, tiny), Error);
  TokenizerOptions huge = options_;
  huge.vocab_size = 50000;  // more pieces than this corpus can make
  try {
    Tokenizer::Train(corpus, huge);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("smaller vocab_size"), std::string::npos)
        << error.what();
  }
  std::vector<Document> empty;
  EXPECT_THROW(Tokenizer::Train(empty, options_), Error);
  try {
    Tokenizer::FromSerializedModel("garbage", "/cache/x.model");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("/cache/x.model"), std::string::npos);
  }
  Tokenizer tokenizer = Tokenizer::TrainOrLoad(corpus, options_);
  std::vector<int32_t> bad = {5, kVocab};
  EXPECT_THROW(tokenizer.Decode(bad), Error);
  // A tokenizer.model that is a device was read until memory ran out.
  try {
    Tokenizer::Load("/dev/zero");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("tokenizer model /dev/zero is a character device"),
              std::string::npos)
        << error.what();
  }
}

TEST(DefaultCacheDir, FollowsTheEnvironment) {
  const char* saved_weft = getenv("WEFT_CACHE_DIR");
  const char* saved_xdg = getenv("XDG_CACHE_HOME");
  std::string weft_value = saved_weft ? saved_weft : "", xdg_value = saved_xdg ? saved_xdg : "";
  setenv("WEFT_CACHE_DIR", "/tmp/weft-cache-test", 1);
  EXPECT_EQ(DefaultCacheDir(), fs::path("/tmp/weft-cache-test"));
  unsetenv("WEFT_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(DefaultCacheDir(), fs::path("/tmp/xdg/weft"));
  unsetenv("XDG_CACHE_HOME");
  if (getenv("HOME")) {
    EXPECT_EQ(DefaultCacheDir(), fs::path(getenv("HOME")) / ".cache" / "weft");
  }
  if (saved_weft) setenv("WEFT_CACHE_DIR", weft_value.c_str(), 1);
  if (saved_xdg) setenv("XDG_CACHE_HOME", xdg_value.c_str(), 1);
}

}  // namespace
}  // namespace weft
