#include "eval/task_gen.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

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
};

// One task before the haystack is laid in: needle lines (in order), intro, question and answer.
struct Skeleton {
  std::string intro;
  std::vector<std::string> needles;
  std::string question, answer;
  std::vector<std::string> values;  // multivalue: the asked name's numbers
};

Skeleton skeleton(const std::string& kind, Rng& r) {
  Skeleton s;
  if (kind == "passkey") {
    const std::string k = r.number(5);
    s.intro = "There is a pass key hidden in this text. Find it and remember it.\n";
    s.needles = {"The pass key is " + k + ". Remember it. " + k + " is the pass key.\n"};
    s.question = "What is the pass key? The pass key is";
    s.answer = k;
  } else if (kind == "multikey") {
    std::vector<int64_t> keys;
    while (keys.size() < 6) {
      const int64_t k = r.range(1000, 9999);
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
    s.intro = "Here is a list of records. Each record has a number.\n";
    const size_t asked = (size_t)r.range(0, 5);
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string v = r.number(5);
      s.needles.push_back("Record " + std::to_string(keys[i]) + ": " + v + ".\n");
      if (i == asked) s.answer = v;
    }
    const std::string k = std::to_string(keys[asked]);
    s.question = "What is the number of Record " + k + "? Record " + k + ":";
  } else if (kind == "multivalue") {
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
  } else if (kind == "multineedle") {
    const auto names = r.names(4);
    const size_t asked = (size_t)r.range(0, 3);
    s.intro = "Here are some favourite numbers.\n";
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string v = r.number(4);
      s.needles.push_back("The favourite number of " + names[i] + " is " + v + ".\n");
      if (i == asked) s.answer = v;
    }
    s.question = "What is the favourite number of " + names[asked] + "? The favourite number of " + names[asked] + " is";
  } else if (kind == "vartrack") {
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
  } else {
    fail("--generate", "unknown task kind '" + kind + "' (kinds: passkey, multikey, multivalue, multineedle, vartrack)");
  }
  return s;
}

// Haystack lines: from `text` starting at a random line (wrapping), or the noise sentence.
class Haystack {
 public:
  explicit Haystack(const std::string& path) {
    if (path.empty()) {
      lines_ = {kNoise};
      return;
    }
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) fail(path, "haystack is not a readable file");
    if (std::filesystem::file_size(path, ec) > kMaxHaystackBytes)
      fail(path, "haystack larger than " + std::to_string(kMaxHaystackBytes >> 20) + " MiB");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path, "cannot open haystack");
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF text
      if (!line.empty()) lines_.push_back(line + "\n");
    }
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

}  // namespace

std::vector<RetrievalTask> generate_retrieval_tasks(const Tokenizer& tok, const TaskGenOptions& o) {
  const Haystack hay(o.haystack_file);
  std::vector<RetrievalTask> tasks;
  for (int64_t length : o.lengths)
    for (const auto& kind : o.kinds)
      for (int i = 0; i < o.n; ++i) {
        // One stream per (seed, kind, length, index): a task does not change when others are added.
        Rng r{std::mt19937_64(mix(mix(mix(mix(o.seed) ^ fnv1a(kind)) ^ (uint64_t)length) ^ (uint64_t)i))};
        const Skeleton s = skeleton(kind, r);
        const int64_t room = length - (int64_t)tok.encode(" " + s.answer, false).size() - 2;
        std::vector<double> depths(s.needles.size());
        for (auto& d : depths) d = r.unit();
        std::sort(depths.begin(), depths.end());
        const int64_t fixed = (int64_t)tok.encode(lay_out(s, {}, depths), true).size();
        if (fixed > room)
          fail("--length", std::to_string(length) + " tokens is too short for a " + kind + " task (" +
                               std::to_string(fixed) + " without haystack)");
        // Haystack lines until the prompt fills the room: half again a guess from a sample, then trim.
        const std::vector<std::string> sample = hay.take(r, 8);
        int64_t sample_tokens = 0;
        for (auto& l : sample) sample_tokens += (int64_t)tok.encode(l, false).size();
        std::vector<std::string> lines =
            hay.take(r, (size_t)((room - fixed) * 12 / std::max<int64_t>(1, sample_tokens) + 4));
        std::string prompt = lay_out(s, lines, depths);
        int64_t n_tok = (int64_t)tok.encode(prompt, true).size();
        while (n_tok > room && !lines.empty()) {
          const int64_t excess_lines = (n_tok - room) * (int64_t)lines.size() / n_tok + 1;
          lines.resize(lines.size() - (size_t)std::min<int64_t>(excess_lines, (int64_t)lines.size()));
          prompt = lay_out(s, lines, depths);
          n_tok = (int64_t)tok.encode(prompt, true).size();
        }
        tasks.push_back({kind + "-" + std::to_string(length) + "-" + std::to_string(i), kind + "@" + std::to_string(length),
                         prompt, s.answer, s.values});
      }
  return tasks;
}

}  // namespace fasa
