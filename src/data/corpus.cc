#include "weft/data/corpus.h"

#include <cstdint>

#include "weft/base/data_files.h"
#include "weft/base/error.h"

namespace weft {
namespace {

constexpr int64_t kMaxTextFileBytes = int64_t{1} << 30;

bool IsContinuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

bool IsBlankLine(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

void RefuseDirectory(const std::filesystem::path& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    Fail("{} is a directory; pass text files (one document per file)", path.string());
  }
}

}  // namespace

void CheckUtf8(std::string_view text, std::string_view what) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    int length = 0;
    uint32_t code = 0;
    if ((lead & 0xE0) == 0xC0) {
      length = 2, code = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, code = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, code = lead & 0x07;
    }
    bool ok = length > 0 && i + length <= n;
    for (int k = 1; ok && k < length; ++k) {
      ok = IsContinuation(bytes[i + k]);
      code = (code << 6) | (bytes[i + k] & 0x3F);
    }
    // Shortest form only; no surrogates; at most U+10FFFF.
    static constexpr uint32_t kMinCode[5] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && code >= kMinCode[length] && !(code >= 0xD800 && code <= 0xDFFF) && code <= 0x10FFFF;
    if (!ok) {
      Fail(
          "{} is not valid UTF-8: malformed byte 0x{:02x} at byte offset {}; convert it to UTF-8 "
          "(e.g. iconv -t UTF-8)",
          what, lead, i);
    }
    i += length;
  }
}

std::vector<std::string> SplitOnBlankLines(std::string_view text) {
  std::vector<std::string> paragraphs;
  std::string current;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    std::string_view line =
        text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (IsBlankLine(line)) {
      if (!current.empty()) paragraphs.push_back(std::move(current));
      current.clear();
    } else {
      if (!current.empty()) current += '\n';
      current += line;
    }
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  if (!current.empty()) paragraphs.push_back(std::move(current));
  return paragraphs;
}

void CheckTextFiles(std::span<const std::filesystem::path> paths) {
  for (const auto& path : paths) {
    RefuseDirectory(path);
    CheckInputFile(path, "text file", kMaxTextFileBytes);
  }
}

std::vector<Document> LoadTextFiles(std::span<const std::filesystem::path> paths,
                                    const TextFileOptions& options) {
  std::vector<Document> documents;
  for (const auto& path : paths) {
    RefuseDirectory(path);
    // Read whole (and tokenized whole): a device such as /dev/zero or a file
    // of more than kMaxTextFileBytes is refused before anything is read.
    std::string text = ReadInputFile(path, "text file", kMaxTextFileBytes);
    CheckUtf8(text, path.string());
    if (!options.split_on_blank_lines) {
      if (!text.empty()) documents.push_back({path.string(), std::move(text)});
      continue;
    }
    int index = 0;
    for (auto& paragraph : SplitOnBlankLines(text)) {
      documents.push_back({path.string() + "#" + std::to_string(++index), std::move(paragraph)});
    }
  }
  return documents;
}

}  // namespace weft
