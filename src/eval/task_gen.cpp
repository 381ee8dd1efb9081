#include "eval/task_gen.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "fasa/error.h"

namespace fasa {

namespace {

constexpr size_t kMaxHaystackBytes = (size_t)256 << 20;  // far more text than any task needs
const char* kNoise = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n";

// Names the KJV-trained model has seen; any names work for other models.
const std::vector<std::string> kNames = {
    "Aaron",   "Abigail", "Abner",   "Absalom", "Asher",    "Boaz",    "Caleb",   "Dinah",   "Eleazar", "Eli",
    "Elijah",  "Elisha",  "Enoch",   "Esau",    "Esther",  "Ezra",     "Gideon",  "Hagar",   "Hannah",  "Hezekiah",
    "Isaac",   "Ishmael", "Jacob",   "Jethro",  "Joab",     "Jonathan", "Joseph", "Joshua",  "Laban",   "Leah",
    "Levi",    "Lot",     "Manasseh", "Miriam", "Mordecai", "Naomi",   "Nathan",  "Noah",    "Obed",    "Rachel",
    "Rebekah", "Reuben",  "Ruth",    "Samson",  "Samuel",   "Sarah",   "Saul",    "Seth",    "Simeon",  "Solomon",
    "Tamar",   "Uriah",   "Zadok",   "Zebulun", "Zerubbabel", "Zipporah"};

// A fixed string hash (std::hash differs between standard libraries: tasks must not).
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Draws computed here rather than by <random>'s distributions, whose results differ between standard
// libraries: a seed gives the same tasks everywhere.
// splitmix64's finaliser: seeds that differ in one input give unrelated streams.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A draw not among `taken` (every pool here is far larger than what it excludes: a few draws at most).
template <class T, class Draw>
T draw_other_than(Draw draw, const std::vector<T>& taken) {
  T v;
  do v = draw();
  while (std::find(taken.begin(), taken.end(), v) != taken.end());
  return v;
}

struct Rng {
  std::mt19937_64 g;
  int64_t range(int64_t lo, int64_t hi) { return lo + (int64_t)(g() % (uint64_t)(hi - lo + 1)); }  // [lo, hi]
  double unit() { return (double)(g() >> 11) * 0x1.0p-53; }  // [0, 1)
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[(size_t)range(0, (int64_t)i - 1)]);
  }
  std::string number(int digits) {
    int64_t lo = 1;
    for (int i = 1; i < digits; ++i) lo *= 10;
    return std::to_string(range(lo, lo * 10 - 1));
  }
  std::string var() {
    std::string s;
    for (int i = 0; i < 4; ++i) s += (char)('A' + range(0, 25));
    return s;
  }
  std::vector<std::string> names(int n) {
    std::vector<std::string> v = kNames;
    shuffle(v);
    v.resize(n);
    return v;
  }
  std::string name_other_than(const std::string& not_this) {
    return draw_other_than<std::string>([&] { return kNames[(size_t)range(0, (int64_t)kNames.size() - 1)]; }, {not_this});
  }
  // A made-up word of 2-3 syllables ("kavo", "tirelu"): as many as a list needs, none of them common.
  std::string word() {
    static const char kConsonants[] = "bdfgklmnprstvz", kVowels[] = "aeiou";
    std::string w;
    for (int64_t i = 0, n = range(2, 3); i < n; ++i) w += {kConsonants[range(0, 13)], kVowels[range(0, 4)]};
    return w;
  }
  std::vector<std::string> distinct_words(size_t n) {  // n <= 100000 of the 347900 there are
    std::set<std::string> seen;
    std::vector<std::string> out;
    while (out.size() < n)
      if (std::string w = word(); seen.insert(w).second) out.push_back(w);
    return out;
  }
  std::string hex(int digits) {
    std::string s;
    for (int i = 0; i < digits; ++i) s += "0123456789abcdef"[range(0, 15)];
    return s;
  }
};

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : sep) + x;
  return out;
}

// The `top` most frequent words of lines of space-separated words (ties: alphabetical).
std::vector<std::string> most_frequent(const std::vector<std::string>& lines, size_t top) {
  std::map<std::string, int64_t> count;
  for (const auto& l : lines)
    for (size_t at = 0; at < l.size();) {
      const size_t end = std::min(l.find_first_of(" \n", at), l.size());
      if (end > at) ++count[l.substr(at, end - at)];
      at = end + 1;
    }
  std::vector<std::pair<int64_t, std::string>> by_count;
  for (const auto& [w, c] : count) by_count.push_back({-c, w});
  std::sort(by_count.begin(), by_count.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < std::min(top, by_count.size()); ++i) out.push_back(by_count[i].second);
  return out;
}

// One task before the haystack is laid in: needle lines (in order), intro, question and answer.
struct Skeleton {
  std::string intro;
  std::vector<std::string> needles;
  std::string question, answer;
  std::vector<std::string> values;  // when several are asked: each of them
  // --distractors: a line of the needles' template with keys and values other than the asked ones
  std::function<std::string(Rng&)> lookalike;
  // cwe, fwe: the context is n lines of this list, and the answer its `top` most frequent words; fewer
  // than min_lines lines would let ties or nothing decide them
  std::function<std::vector<std::string>(Rng&, size_t n)> list;
  size_t top = 0, min_lines = 0;
};

std::vector<int64_t> distinct_keys(Rng& r, size_t n) {
  std::vector<int64_t> keys;
  while (keys.size() < n) {
    const int64_t k = r.range(1000, 9999);
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  return keys;
}

// "Record K: V." lines for keys, and look-alikes with keys outside them; returns the values in the
// keys' order (distinct ones where several are asked at once, so that none earns another's credit).
std::vector<std::string> records(Skeleton& s, Rng& r, const std::vector<int64_t>& keys, bool distinct) {
  s.intro = "Here is a list of records. Each record has a number.\n";
  std::vector<std::string> values;
  for (int64_t k : keys) {
    values.push_back(distinct ? draw_other_than<std::string>([&] { return r.number(5); }, values) : r.number(5));
    s.needles.push_back("Record " + std::to_string(k) + ": " + values.back() + ".\n");
  }
  s.lookalike = [keys](Rng& g) {
    return "Record " + std::to_string(draw_other_than<int64_t>([&] { return g.range(1000, 9999); }, keys)) + ": " +
           g.number(5) + ".\n";
  };
  return values;
}

// One needle "The THING of NAME is VALUE." asked by name, among look-alikes of other names.
void keyed_needle(Skeleton& s, Rng& r, const std::string& thing, std::function<std::string(Rng&)> value) {
  const std::string name = r.names(1)[0], v = value(r);
  s.intro = "Remember the " + thing + " of each name.\n";
  s.needles = {"The " + thing + " of " + name + " is " + v + ".\n"};
  s.question = "What is the " + thing + " of " + name + "? The " + thing + " of " + name + " is";
  s.answer = v;
  s.lookalike = [=](Rng& g) { return "The " + thing + " of " + g.name_other_than(name) + " is " + value(g) + ".\n"; };
}

// The lines of a text file (without line ends; CRLF text too), its size capped: a haystack or a dictionary.
std::vector<std::string> read_lines(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) fail(path, what + " is not a readable file");
  if (std::filesystem::file_size(path, ec) > kMaxHaystackBytes)
    fail(path, what + " larger than " + std::to_string(kMaxHaystackBytes >> 20) + " MiB");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open " + what);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

// Dictionary entries in GCIDE's format for qa (blocks between blank lines; a block whose first line is
// "Headword \Head*word\ ..." is an entry), each with a quote: the first 8 words of its first line that
// starts with a capital letter outside the etymology's brackets after the headword line (its definition,
// e.g. "The grivet."), not a cross-reference ("See ...", "Same as ..."), and no other entry's quote.
class Dictionary {
 public:
  struct Entry {
    std::string text, headword, quote;
  };
  explicit Dictionary(const std::string& path) {
    if (path.empty()) return;
    std::vector<std::string> block;
    auto close_block = [&] {
      if (!block.empty()) add(block);
      block.clear();
    };
    for (auto& line : read_lines(path, "qa dictionary")) {
      if (line.find_first_not_of(" \t") == std::string::npos) close_block();
      else block.push_back(line);
    }
    close_block();
    std::map<std::string, int> uses;  // a quote two entries share would have two right answers
    for (const auto& e : entries_) ++uses[e.quote];
    std::erase_if(entries_, [&](const Entry& e) { return uses[e.quote] > 1; });
    if (entries_.size() < 2) fail(path, "qa dictionary has fewer than two entries in GCIDE's format (\"Word \\Word\\ ...\")");
  }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  const Entry& operator[](size_t i) const { return entries_[i]; }

 private:
  void add(const std::vector<std::string>& block) {
    const std::string& head = block[0];
    const size_t slash = head.find(" \\");
    if (slash == 0 || slash == std::string::npos || !std::isalpha((unsigned char)head[0])) return;
    int open = 0;  // '[' not yet closed: an etymology running over lines
    auto track = [&open](const std::string& line) {
      for (char c : line) open = std::max(0, open + (c == '[') - (c == ']'));
    };
    track(head);
    for (size_t i = 1; i < block.size(); ++i) {
      const bool inside = open > 0;
      track(block[i]);
      const size_t at = block[i].find_first_not_of(' ');
      if (inside || at == std::string::npos || block[i][at] < 'A' || block[i][at] > 'Z') continue;
      if (block[i].compare(at, 4, "See ") == 0 || block[i].compare(at, 7, "Same as") == 0) return;
      std::string quote;
      size_t words = 0;
      for (size_t p = at; p < block[i].size() && words < 8;) {
        const size_t end = std::min(block[i].find(' ', p), block[i].size());
        if (end > p) quote += (words++ ? " " : "") + block[i].substr(p, end - p);
        p = end + 1;
      }
      if (words < 2) return;
      std::string text;
      for (auto& l : block) text += l + "\n";
      entries_.push_back({text + "\n", head.substr(0, slash), quote});
      return;
    }
  }
  std::vector<Entry> entries_;
};

void passkey_task(Skeleton& s, int64_t, Rng& r, const Dictionary&) {
  const std::string k = r.number(5);
  s.intro = "There is a pass key hidden in this text. Find it and remember it.\n";
  s.needles = {"The pass key is " + k + ". Remember it. " + k + " is the pass key.\n"};
  s.question = "What is the pass key? The pass key is";
  s.answer = k;
  s.lookalike = [k](Rng& g) {  // the pass key has no key to vary: other numbers, said not to be it
    return "The number " + draw_other_than<std::string>([&] { return g.number(5); }, {k}) + " is not the pass key.\n";
  };
}

void multikey_task(Skeleton& s, int64_t, Rng& r, const Dictionary&) {
  const std::vector<int64_t> keys = distinct_keys(r, 6);
  const size_t asked = (size_t)r.range(0, 5);
  s.answer = records(s, r, keys, false)[asked];
  const std::string k = std::to_string(keys[asked]);
  s.question = "What is the number of Record " + k + "? Record " + k + ":";
}

// RULER's multi-query: several keys asked at once
void multiquery_task(Skeleton& s, int64_t, Rng& r, const Dictionary&) {
  const std::vector<int64_t> keys = distinct_keys(r, 8);
  std::vector<size_t> order = {0, 1, 2, 3, 4, 5, 6, 7};
  r.shuffle(order);
  order.resize(3);
  const std::vector<std::string> values = records(s, r, keys, true);
  std::vector<std::string> asked_keys;  // values in the question's order, not the text's
  for (size_t i : order) {
    asked_keys.push_back(std::to_string(keys[i]));
    s.values.push_back(values[i]);
  }
  s.answer = join(s.values);
  s.question = "What are the numbers of Records " + asked_keys[0] + ", " + asked_keys[1] + " and " + asked_keys[2] +
               "? The numbers are";
}

void word_task(Skeleton& s, int64_t, Rng& r, const Dictionary&) {
  keyed_needle(s, r, "magic word", [](Rng& g) { return g.word(); });
}

void uuid_task(Skeleton& s, int64_t, Rng& r, const Dictionary&) {
  keyed_needle(s, r, "code", [](Rng& g) {
    return g.hex(8) + "-" + g.hex(4) + "-" + g.hex(4) + "-" + g.hex(4) + "-" + g.hex(12);
  });
}

// RULER's common-word extraction: ten words 3 % of the list each, the rest once
void cwe_task(Skeleton& s, int64_t length, Rng& r, const Dictionary&) {
  s.intro = "Below is a list of words. Some words appear many times. Remember the ten words that appear most often.\n";
  s.question = "What are the ten words that appear most often in the list above? The ten most common words are";
  s.top = 10, s.min_lines = 40;  // the ten words' 3 lines each, and others
  // Its words drawn once, enough for a list that fits (a line is at least 2 tokens), so that lists
  // planned again for other lengths keep their token counts; a first, too long plan repeats them.
  s.list = [words = r.distinct_words((size_t)std::min<int64_t>(length / 2 + 11, 100000))](Rng& g, size_t n) {
    std::vector<std::string> lines;
    for (size_t c = 0; c < 10; ++c)
      for (size_t i = 0; i < std::max<size_t>(3, n * 3 / 100); ++i) lines.push_back(words[c] + "\n");
    for (size_t w = 0; lines.size() < n; ++w) lines.push_back(words[10 + w % (words.size() - 10)] + "\n");
    g.shuffle(lines);
    lines.resize(n);
    return lines;
  };
}

// RULER's frequent-word extraction: coded words as often as Zipf's law (alpha 2) says
void fwe_task(Skeleton& s, int64_t, Rng& r, const Dictionary&) {
  s.intro = "Read the coded text below and count how often each coded word appears.\n";
  s.question = "What are the three most frequent coded words in the text above? The three most frequent coded words are";
  s.top = 3, s.min_lines = 8;  // 80 words: the first four ranks 49, 12, 5, 3
  s.list = [words = r.distinct_words(40)](Rng& g, size_t n) {  // n lines of 10 words; word k makes 1/k^2 of them
    double sum = 0;
    for (size_t k = 1; k <= words.size(); ++k) sum += 1.0 / double(k * k);
    std::vector<std::string> text;
    for (size_t k = 1; k <= words.size(); ++k)
      text.insert(text.end(), (size_t)(double(n * 10) / double(k * k) / sum), words[k - 1]);
    for (size_t k = words.size(); text.size() < n * 10; k = k > 5 ? k - 1 : words.size()) text.push_back(words[k - 1]);
    g.shuffle(text);
    std::vector<std::string> lines(n);
    for (size_t i = 0; i < text.size(); ++i) lines[i / 10] += text[i] + (i % 10 == 9 ? "\n" : " ");
    return lines;
  };
}

void multivalue_task(Skeleton& s, int64_t, Rng& r, const Dictionary&) {
  const auto names = r.names(3);
  std::vector<std::string> who = {names[0], names[0], names[0], names[1], names[2]};
  r.shuffle(who);
  s.intro = "Each name below has one or more numbers.\n";
  std::vector<std::string> drawn;  // distinct, so that no answer earns a value twice or another name's
  for (const auto& n : who) {
    std::string v;
    do v = r.number(4);
    while (std::find(drawn.begin(), drawn.end(), v) != drawn.end());
    drawn.push_back(v);
    s.needles.push_back("One number of " + n + " is " + v + ".\n");
    if (n == names[0]) {
      s.answer += (s.answer.empty() ? "" : ", ") + v;
      s.values.push_back(v);
    }
  }
  s.question = "What are all the numbers of " + names[0] + "? The numbers of " + names[0] + " are";
  s.lookalike = [asked = names[0]](Rng& g) { return "One number of " + g.name_other_than(asked) + " is " + g.number(4) + ".\n"; };
}

void multineedle_task(Skeleton& s, int64_t, Rng& r, const Dictionary&) {
  const auto names = r.names(4);
  const size_t asked = (size_t)r.range(0, 3);
  s.intro = "Here are some favourite numbers.\n";
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string v = r.number(4);
    s.needles.push_back("The favourite number of " + names[i] + " is " + v + ".\n");
    if (i == asked) s.answer = v;
  }
  s.question = "What is the favourite number of " + names[asked] + "? The favourite number of " + names[asked] + " is";
  s.lookalike = [name = names[asked]](Rng& g) {
    return "The favourite number of " + g.name_other_than(name) + " is " + g.number(4) + ".\n";
  };
}

void vartrack_task(Skeleton& s, int64_t, Rng& r, const Dictionary&) {
  const std::string a = r.var(), b = r.var(), c = r.var(), d = r.var(), e = r.var();
  const std::string v = r.number(5), w = r.number(5);
  std::vector<std::string> chain = {"VAR " + a + " = " + v + ".\n", "VAR " + b + " = VAR " + a + ".\n",
                                    "VAR " + c + " = VAR " + b + ".\n"};
  std::vector<std::string> other = {"VAR " + d + " = " + w + ".\n", "VAR " + e + " = VAR " + d + ".\n"};
  size_t i = 0, j = 0;  // a random merge of the two chains, each defined before it is used
  while (i < chain.size() || j < other.size())
    s.needles.push_back(i < chain.size() && (j == other.size() || r.range(0, 9) < 6) ? chain[i++] : other[j++]);
  s.intro = "Follow the chain of variables.\n";
  s.question = "What is the value of VAR " + c + "? VAR " + c + " =";
  s.answer = "VAR " + b + " = VAR " + a + " = " + v;
  s.lookalike = [used = std::vector<std::string>{a, b, c, d, e}](Rng& g) {  // assignments of other variables
    return "VAR " + draw_other_than<std::string>([&] { return g.var(); }, used) + " = " + g.number(5) + ".\n";
  };
}

// RULER's QA: a question about one document among many (dictionary entries)
void qa_task(Skeleton& s, int64_t, Rng& r, const Dictionary& dict) {
  if (dict.empty())
    fail("--generate", "kind qa needs --qa-entries FILE (dictionary entries in GCIDE's format, e.g. "
                       "../shared/eval/heldout_gcide.txt, held out from training)");
  const size_t gold = (size_t)r.range(0, (int64_t)dict.size() - 1);
  const auto& e = dict[gold];
  s.intro = "Here are entries of a dictionary.\n\n";
  s.needles = {e.text};
  s.question = "Which word does the dictionary above define as \"" + e.quote + "\"? The word is";
  s.answer = e.headword;
  s.list = [&dict, gold](Rng& g, size_t n) {  // the entries that follow a random one, without the asked one
    std::vector<std::string> out;
    for (size_t at = (size_t)g.range(0, (int64_t)dict.size() - 1); out.size() < std::min(n, dict.size() - 1); ++at)
      if (at % dict.size() != gold) out.push_back(dict[at % dict.size()].text);
    return out;
  };
  s.min_lines = 1;
}

// Each kind's skeleton, one row each, with the lists it is in: "all" (the retrieval model's lookups),
// "every" (all and RULER's other kinds), neither (qa, which needs a file). The order is the lists'.
using SkeletonBuilder = void (*)(Skeleton& s, int64_t length, Rng& r, const Dictionary& dict);
enum class KindList { All, Every, NeedsFile };
struct TaskKind {
  std::string_view name;
  SkeletonBuilder build;
  KindList list;
};
constexpr TaskKind kTaskKinds[] = {
    {"passkey", passkey_task, KindList::All},
    {"multikey", multikey_task, KindList::All},
    {"multivalue", multivalue_task, KindList::All},
    {"multineedle", multineedle_task, KindList::All},
    {"vartrack", vartrack_task, KindList::All},
    {"word", word_task, KindList::Every},
    {"uuid", uuid_task, KindList::Every},
    {"multiquery", multiquery_task, KindList::Every},
    {"cwe", cwe_task, KindList::Every},
    {"fwe", fwe_task, KindList::Every},
    {"qa", qa_task, KindList::NeedsFile},
};

std::vector<std::string> kinds_up_to(KindList list) {
  std::vector<std::string> out;
  for (const TaskKind& k : kTaskKinds)
    if (k.list <= list) out.emplace_back(k.name);
  return out;
}

Skeleton skeleton(const std::string& kind, int64_t length, Rng& r, const Dictionary& dict) {
  for (const TaskKind& k : kTaskKinds) {
    if (k.name != kind) continue;
    Skeleton s;
    k.build(s, length, r, dict);
    return s;
  }
  fail("--generate", "unknown task kind '" + kind + "' (kinds: " + join(every_task_kind()) + ", qa)");
}

// Haystack lines: from `text` starting at a random line (wrapping), or the noise sentence.
class Haystack {
 public:
  explicit Haystack(const std::string& path) {
    if (path.empty()) {
      lines_ = {kNoise};
      return;
    }
    for (auto& line : read_lines(path, "haystack"))
      if (!line.empty()) lines_.push_back(line + "\n");
    if (lines_.empty()) fail(path, "haystack has no text");
  }
  std::vector<std::string> take(Rng& r, size_t n) const {
    std::vector<std::string> out;
    size_t at = (size_t)r.range(0, (int64_t)lines_.size() - 1);
    for (size_t i = 0; i < n; ++i) out.push_back(lines_[(at + i) % lines_.size()]);
    return out;
  }

 private:
  std::vector<std::string> lines_;
};

// depths: where each needle goes, as a sorted share of the haystack (0: before it, 1: after it).
std::string lay_out(const Skeleton& s, const std::vector<std::string>& hay, const std::vector<double>& depths) {
  std::string out = s.intro;
  size_t j = 0;
  for (size_t i = 0; i <= hay.size(); ++i) {
    for (; j < s.needles.size() && (size_t)(depths[j] * (double)hay.size() + 0.5) == i; ++j) out += s.needles[j];
    if (i < hay.size()) out += hay[i];
  }
  return out + s.question;
}

// One stream per (seed, kind, length, index): a task does not change when others are added.
Rng task_rng(uint64_t seed, const std::string& kind, int64_t length, int i) {
  return Rng{std::mt19937_64(mix(mix(mix(mix(seed) ^ fnv1a(kind)) ^ (uint64_t)length) ^ (uint64_t)i))};
}

// The i-th task of `kind` at `length` tokens: its skeleton's needles at random depths among as many
// context lines as fit. Every draw comes from the task's own stream, in a fixed order.
class TaskMaker {
 public:
  TaskMaker(const Tokenizer& tok, const TaskGenOptions& o, const Haystack& hay, const Dictionary& dict,
            const std::string& kind, int64_t length, int i)
      : tok_(tok), o_(o), hay_(hay), kind_(kind), length_(length), i_(i), r_(task_rng(o.seed, kind, length, i)),
        s_(skeleton(kind, length, r_, dict)) {}

  RetrievalTask make() {
    draw_depths();
    const int64_t fixed = (int64_t)tok_.encode(lay_out(s_, {}, depths_), true).size();
    if (fixed > room()) fail_too_short(std::to_string(fixed) + " without haystack");
    std::vector<std::string> lines = first_guess_lines(fixed);
    std::string prompt = trim_to_fit(lines);
    // A word list planned again for the length it was cut to, until it fits uncut: its frequencies as planned.
    for (size_t planned = 0; s_.top && lines.size() != planned;) {
      lines = s_.list(r_, planned = lines.size());
      prompt = trim_to_fit(lines);
    }
    if (s_.list && (s_.values.size() < s_.top || lines.size() < s_.min_lines))
      fail_too_short(std::to_string(lines.size()) + " lines of its list fit");
    if (kind_ == "qa" && (int64_t)tok_.encode(prompt, true).size() < room() * 8 / 10)
      fail(o_.qa_entries_file, "too few dictionary entries to fill a " + std::to_string(length_) + "-token qa task");
    // Dictionary entries are text as any prompt's; look-alike needles and word lists are not.
    const bool natural = (!s_.list || kind_ == "qa") && !o_.distractors;
    const std::string at = std::to_string(length_);
    return {kind_ + "-" + at + "-" + std::to_string(i_), kind_ + "@" + at, prompt, s_.answer, s_.values, natural};
  }

 private:
  [[noreturn]] void fail_too_short(const std::string& why) const {
    fail("--length", std::to_string(length_) + " tokens is too short for a " + kind_ + " task (" + why + ")");
  }
  void draw_depths() {
    depths_.resize(s_.needles.size());
    for (auto& d : depths_) d = r_.unit();
    std::sort(depths_.begin(), depths_.end());
  }
  // Tokens the prompt may take: the length less the answer's and two more.
  int64_t room() const { return length_ - (int64_t)tok_.encode(" " + s_.answer, false).size() - 2; }
  // The context's lines: the kind's own list (cwe, fwe, qa), look-alike needles, or the haystack.
  std::vector<std::string> context_lines(size_t n) {
    if (s_.list) return s_.list(r_, n);
    if (!o_.distractors) return hay_.take(r_, n);
    std::vector<std::string> lines(n);
    for (auto& l : lines) l = s_.lookalike(r_);
    return lines;
  }
  // Lines until the prompt fills the room: half again a guess from a sample (trim_to_fit cuts them).
  std::vector<std::string> first_guess_lines(int64_t fixed) {
    const std::vector<std::string> sample = context_lines(8);
    int64_t sample_tokens = 0;
    for (auto& l : sample) sample_tokens += (int64_t)tok_.encode(l, false).size();
    return context_lines((size_t)((room() - fixed) * 12 / std::max<int64_t>(1, sample_tokens) + 4));
  }
  // A list's answer is its most frequent words, known once the list is cut to length.
  std::string lay_out_and_answer(const std::vector<std::string>& lines) {
    if (s_.top) {
      s_.values = most_frequent(lines, s_.top);
      s_.answer = join(s_.values);
    }
    return lay_out(s_, lines, depths_);
  }
  // The prompt, `lines` cut from the end until it fits the room.
  std::string trim_to_fit(std::vector<std::string>& lines) {
    std::string prompt = lay_out_and_answer(lines);
    for (int64_t n_tok; (n_tok = (int64_t)tok_.encode(prompt, true).size()) > room() && !lines.empty();) {
      const int64_t excess_lines = (n_tok - room()) * (int64_t)lines.size() / n_tok + 1;
      lines.resize(lines.size() - (size_t)std::min<int64_t>(excess_lines, (int64_t)lines.size()));
      prompt = lay_out_and_answer(lines);
    }
    return prompt;
  }

  const Tokenizer& tok_;
  const TaskGenOptions& o_;
  const Haystack& hay_;
  const std::string& kind_;
  const int64_t length_;
  const int i_;
  Rng r_;  // (before s_: the skeleton draws from it)
  Skeleton s_;
  std::vector<double> depths_;  // each needle's, sorted: see lay_out
};

}  // namespace

const std::vector<std::string>& generated_task_kinds() {
  static const std::vector<std::string> kinds = kinds_up_to(KindList::All);
  return kinds;
}

const std::vector<std::string>& every_task_kind() {
  static const std::vector<std::string> kinds = kinds_up_to(KindList::Every);
  return kinds;
}

std::vector<std::string> expand_task_kinds(const std::vector<std::string>& kinds) {
  if (kinds == std::vector<std::string>{"all"}) return generated_task_kinds();
  if (kinds == std::vector<std::string>{"every"}) return every_task_kind();
  return kinds;
}

std::vector<RetrievalTask> generate_retrieval_tasks(const Tokenizer& tok, const TaskGenOptions& o) {
  if (o.distractors && !o.haystack_file.empty())
    fail("--distractors", "fills the context with look-alike needles: give it or --haystack, not both");
  const Haystack hay(o.haystack_file);
  const Dictionary dict(o.qa_entries_file);
  std::vector<RetrievalTask> tasks;
  for (int64_t length : o.lengths)
    for (const auto& kind : o.kinds)
      for (int i = 0; i < o.n; ++i) tasks.push_back(TaskMaker(tok, o, hay, dict, kind, length, i).make());
  return tasks;
}

}  // namespace fasa
