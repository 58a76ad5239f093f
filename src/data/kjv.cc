#include "weft/data/kjv.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

#include "weft/base/error.h"

extern char** environ;

namespace weft {
namespace {

constexpr const char* kBibleProgram = "/usr/bin/bible";
constexpr const char* kBibleDataDir = "/usr/lib";
constexpr int kVerseCount = 31102;

// The `bible` program's abbreviation (as it prints references) and the full
// name of each book, in canonical order.
// clang-format off
constexpr std::array<std::pair<std::string_view, std::string_view>, 66> kBooks = {{
    {"Ge", "Genesis"},          {"Exo", "Exodus"},          {"Lev", "Leviticus"},
    {"Num", "Numbers"},         {"Deu", "Deuteronomy"},     {"Josh", "Joshua"},
    {"Jdgs", "Judges"},         {"Ruth", "Ruth"},           {"1Sm", "1 Samuel"},
    {"2Sm", "2 Samuel"},        {"1Ki", "1 Kings"},         {"2Ki", "2 Kings"},
    {"1Chr", "1 Chronicles"},   {"2Chr", "2 Chronicles"},   {"Ezra", "Ezra"},
    {"Neh", "Nehemiah"},        {"Est", "Esther"},          {"Job", "Job"},
    {"Psa", "Psalms"},          {"Prv", "Proverbs"},        {"Eccl", "Ecclesiastes"},
    {"SSol", "Song of Solomon"}, {"Isa", "Isaiah"},         {"Jer", "Jeremiah"},
    {"Lam", "Lamentations"},    {"Eze", "Ezekiel"},         {"Dan", "Daniel"},
    {"Hos", "Hosea"},           {"Joel", "Joel"},           {"Amos", "Amos"},
    {"Obad", "Obadiah"},        {"Jonah", "Jonah"},         {"Mic", "Micah"},
    {"Nahum", "Nahum"},         {"Hab", "Habakkuk"},        {"Zep", "Zephaniah"},
    {"Hag", "Haggai"},          {"Zec", "Zechariah"},       {"Mal", "Malachi"},
    {"Mat", "Matthew"},         {"Mark", "Mark"},           {"Luke", "Luke"},
    {"John", "John"},           {"Acts", "Acts"},           {"Rom", "Romans"},
    {"1Cor", "1 Corinthians"},  {"2Cor", "2 Corinthians"},  {"Gal", "Galatians"},
    {"Eph", "Ephesians"},       {"Phi", "Philippians"},     {"Col", "Colossians"},
    {"1Th", "1 Thessalonians"}, {"2Th", "2 Thessalonians"}, {"1Tim", "1 Timothy"},
    {"2Tim", "2 Timothy"},      {"Titus", "Titus"},         {"Phmn", "Philemon"},
    {"Heb", "Hebrews"},         {"Jas", "James"},           {"1Pet", "1 Peter"},
    {"2Pet", "2 Peter"},        {"1Jn", "1 John"},          {"2Jn", "2 John"},
    {"3Jn", "3 John"},          {"Jude", "Jude"},           {"Rev", "Revelation"},
}};
// clang-format on

[[noreturn]] void FailMissing(std::string_view what) {
  Fail(
      "the King James Bible corpus needs Debian's bible-kjv package ({} not found); install "
      "bible-kjv (scripts/setup does)",
      what);
}

// Runs `bible` without a shell and returns its standard output.
std::string RunBibleProgram() {
  std::error_code error;
  if (!std::filesystem::exists(kBibleProgram, error)) FailMissing(kBibleProgram);
  std::string data_file = std::string(kBibleDataDir) + "/bible.data";
  if (!std::filesystem::exists(data_file, error)) FailMissing(data_file);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) Fail("cannot create a pipe for {}", kBibleProgram);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // -f: one verse per line, each preceded by its reference; -p: only the
  // packaged data file, never a stray ./bible.data.
  std::string arg0 = "bible", arg1 = "-f", arg2 = "-p", arg3 = kBibleDataDir,
              arg4 = "Gen1:1-Rev22:21";
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), arg3.data(), arg4.data(), nullptr};
  pid_t pid = 0;
  int spawn_error = posix_spawn(&pid, kBibleProgram, &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawn_error != 0) {
    ::close(pipe_fds[0]);
    Fail("cannot run {}: {}; reinstall bible-kjv", kBibleProgram,
         std::generic_category().message(spawn_error));
  }
  std::string output;
  char buffer[1 << 16];
  while (true) {
    ssize_t got = ::read(pipe_fds[0], buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    output.append(buffer, static_cast<size_t>(got));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Fail("{} -f -p {} Gen1:1-Rev22:21 failed (status {}); reinstall bible-kjv", kBibleProgram,
         kBibleDataDir, status);
  }
  return output;
}

struct Verse {
  std::string_view book;  // abbreviation
  int chapter = 0, verse = 0;
  std::string_view text;
};

// "1Sm3:10 And the LORD came, …" → {"1Sm", 3, 10, "And the LORD came, …"}.
bool ParseVerseLine(std::string_view line, Verse* out) {
  size_t colon = line.find(':');
  size_t space = line.find(' ');
  if (colon == std::string_view::npos || space == std::string_view::npos || space < colon) {
    return false;
  }
  size_t digits = colon;
  while (digits > 1 && line[digits - 1] >= '0' && line[digits - 1] <= '9') --digits;
  if (digits == colon) return false;
  out->book = line.substr(0, digits);
  out->chapter = std::stoi(std::string(line.substr(digits, colon - digits)));
  std::string verse(line.substr(colon + 1, space - colon - 1));
  if (verse.empty() || verse.find_first_not_of("0123456789") != std::string::npos) return false;
  out->verse = std::stoi(verse);
  out->text = line.substr(space + 1);
  return true;
}

}  // namespace

KjvUnit ParseKjvUnit(std::string_view text, std::string_view what) {
  if (text == "book") return KjvUnit::kBook;
  if (text == "chapter") return KjvUnit::kChapter;
  if (text == "verse") return KjvUnit::kVerse;
  Fail("{}: unknown King James Bible unit '{}'; use \"book\", \"chapter\" or \"verse\"", what,
       text);
}

std::vector<Document> LoadKjvBible(KjvUnit unit) {
  std::string output = RunBibleProgram();
  std::vector<Document> documents;
  size_t book_index = 0;
  bool started = false;
  int last_chapter = 0, verses = 0;
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    std::string_view line(output.data() + start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    Verse verse;
    if (!ParseVerseLine(line, &verse)) {
      Fail("unexpected line from {}: '{}'; the bible-kjv package may be a different version",
           kBibleProgram, line.substr(0, 80));
    }
    bool new_book = !started || verse.book != kBooks[book_index].first;
    if (new_book && started) ++book_index;
    if (book_index >= kBooks.size() || verse.book != kBooks[book_index].first) {
      Fail(
          "unexpected book '{}' from {} (expected '{}'); the bible-kjv package may be a different "
          "version",
          verse.book, kBibleProgram,
          book_index < kBooks.size() ? kBooks[book_index].first : "end of text");
    }
    started = true;
    bool new_chapter = new_book || verse.chapter != last_chapter;
    last_chapter = verse.chapter;
    std::string_view name = kBooks[book_index].second;
    switch (unit) {
      case KjvUnit::kBook:
        if (new_book)
          documents.push_back({std::string(name), ""});
        else
          documents.back().text += new_chapter ? "\n\n" : "\n";
        break;
      case KjvUnit::kChapter:
        if (new_chapter)
          documents.push_back({fmt::format("{} {}", name, verse.chapter), ""});
        else
          documents.back().text += "\n";
        break;
      case KjvUnit::kVerse:
        documents.push_back({fmt::format("{} {}:{}", name, verse.chapter, verse.verse), ""});
        break;
    }
    documents.back().text += verse.text;
    ++verses;
  }
  if (book_index + 1 != kBooks.size() || verses != kVerseCount) {
    Fail("{} printed {} verses in {} books, expected {} in 66; reinstall bible-kjv", kBibleProgram,
         verses, book_index + 1, kVerseCount);
  }
  return documents;
}

}  // namespace weft
