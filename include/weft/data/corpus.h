// Documents: the unit of packing. A document's tokens never attend to, or
// predict, another document's tokens.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

struct Document {
  std::string name;  // where it came from: "Genesis", "notes.txt", "notes.txt#3"
  std::string text;  // UTF-8
};

// Throws weft::Error naming `what` and the byte offset of the first byte that
// is not part of a well-formed UTF-8 sequence (overlong forms, surrogates and
// code points above U+10FFFF are malformed too).
void CheckUtf8(std::string_view text, std::string_view what);

// Splits a text into paragraphs at runs of blank lines (lines holding only
// spaces, tabs or '\r'). Paragraphs keep their inner newlines, lose the
// surrounding blank lines, and empty ones are dropped.
std::vector<std::string> SplitOnBlankLines(std::string_view text);

struct TextFileOptions {
  // false: each file is one document, named by its path.
  // true: each paragraph (see SplitOnBlankLines) is a document, named
  // "<path>#<n>" with n counting from 1.
  bool split_on_blank_lines = false;
};

// Reads UTF-8 text files into documents, in the order given. Errors name the
// file: unreadable, a directory, not a regular file (a device, a FIFO), more
// than 1 GiB (refused unread), or not UTF-8 (with the byte offset). Empty
// files (or paragraphs) produce no document.
std::vector<Document> LoadTextFiles(std::span<const std::filesystem::path> paths,
                                    const TextFileOptions& options = {});

// Refuses, as LoadTextFiles would, a path that does not exist, a directory,
// a file that is not regular or one over 1 GiB, without reading any: for a
// command to check its --data files before slower work (loading a model).
void CheckTextFiles(std::span<const std::filesystem::path> paths);

}  // namespace weft
