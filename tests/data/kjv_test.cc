#include "weft/data/kjv.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "weft/base/error.h"

namespace weft {
namespace {

int Count(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

TEST(LoadKjvBible, BooksInCanonicalOrder) {
  auto books = LoadKjvBible(KjvUnit::kBook);
  ASSERT_EQ(books.size(), 66u);
  EXPECT_EQ(books[0].name, "Genesis");
  EXPECT_EQ(books[18].name, "Psalms");
  EXPECT_EQ(books[39].name, "Matthew");
  EXPECT_EQ(books[65].name, "Revelation");
  EXPECT_EQ(books[0].text.rfind("In the beginning God created the heaven and the earth.\nAnd the "
                                "earth was without form",
                                0),
            0u);
  EXPECT_TRUE(books[65].text.ends_with("be with you all. Amen."));
  // Genesis has 50 chapters (49 blank-line separators) and 1533 verses.
  EXPECT_EQ(Count(books[0].text, "\n\n"), 49);
  EXPECT_EQ(Count(books[0].text, "\n") - 49, 1532);
  size_t total = 0;
  for (const auto& book : books) {
    EXPECT_FALSE(book.text.empty()) << book.name;
    EXPECT_EQ(book.text.find("1:1"), std::string::npos)
        << "verse numbers leaked into " << book.name;
    total += book.text.size();
  }
  EXPECT_GT(total, 4000000u);
}

TEST(LoadKjvBible, ChaptersAndVerses) {
  auto chapters = LoadKjvBible(KjvUnit::kChapter);
  ASSERT_EQ(chapters.size(), 1189u);
  EXPECT_EQ(chapters[0].name, "Genesis 1");
  auto psalm23 = std::find_if(chapters.begin(), chapters.end(),
                              [](const Document& d) { return d.name == "Psalms 23"; });
  ASSERT_NE(psalm23, chapters.end());
  EXPECT_EQ(psalm23->text.rfind("The LORD is my shepherd; I shall not want.\n", 0), 0u);
  EXPECT_EQ(Count(psalm23->text, "\n"), 5);  // six verses

  auto verses = LoadKjvBible(KjvUnit::kVerse);
  ASSERT_EQ(verses.size(), 31102u);
  auto john316 = std::find_if(verses.begin(), verses.end(),
                              [](const Document& d) { return d.name == "John 3:16"; });
  ASSERT_NE(john316, verses.end());
  EXPECT_EQ(john316->text.rfind("For God so loved the world,", 0), 0u);
  EXPECT_EQ(verses.back().name, "Revelation 22:21");
}

TEST(ParseKjvUnit, NamesTheChoices) {
  EXPECT_EQ(ParseKjvUnit("chapter", "unit"), KjvUnit::kChapter);
  try {
    ParseKjvUnit("books", "config.toml:3:8: data.kjv_unit");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("config.toml:3:8"), std::string::npos) << message;
    EXPECT_NE(message.find("\"book\""), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace weft
