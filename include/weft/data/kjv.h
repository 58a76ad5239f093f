// The King James Bible as a corpus, from Debian's bible-kjv package: its
// `bible` program decompresses the text (/usr/lib/bible.data) for us.
#pragma once

#include <string_view>
#include <vector>

#include "weft/data/corpus.h"

namespace weft {

// How the Bible is cut into documents.
enum class KjvUnit {
  kBook,     // 66 documents named "Genesis" … "Revelation"
  kChapter,  // 1189 documents named "Genesis 1" …
  kVerse,    // 31102 documents named "Genesis 1:1" …
};

// "book" | "chapter" | "verse"; throws weft::Error naming `what` otherwise.
KjvUnit ParseKjvUnit(std::string_view text, std::string_view what);

// The Bible in canonical order. A document's text is its verses, one per
// line without verse numbers; in a book, chapters are separated by a blank
// line. Throws weft::Error ("install bible-kjv (scripts/setup does)") when
// the package is missing, or when its output is not what we expect.
std::vector<Document> LoadKjvBible(KjvUnit unit = KjvUnit::kBook);

}  // namespace weft
