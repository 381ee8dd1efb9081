// A main for the fuzz harnesses without libFuzzer (gcc builds, ctest): runs the harness on every seed
// file it is given, whole and with a fixed set of small corruptions (truncations, flipped bytes), so
// the harnesses compile on every build and the corpora stay clean under the test suite's sanitizers.
// Usage: fuzz_replay_NAME FILE_OR_DIR...
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void run(const std::string& bytes) { LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()); }

// The seed, then 8 truncations and 24 copies with 1-4 bytes changed (the same on every run).
size_t replay(const std::string& seed) {
  run(seed);
  std::mt19937 rng(1);
  size_t n = 1;
  for (int i = 1; i <= 8; ++i, ++n) run(seed.substr(0, seed.size() * i / 9));
  for (int i = 0; i < 24 && !seed.empty(); ++i, ++n) {
    std::string s = seed;
    for (int k = 0, flips = 1 + (int)(rng() % 4); k < flips; ++k) s[rng() % s.size()] = (char)(rng() & 0xff);
    run(s);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    if (!fs::exists(argv[i])) {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 2;
    }
    if (fs::is_directory(argv[i]))
      for (const auto& e : fs::directory_iterator(argv[i])) files.push_back(e.path());
    else
      files.push_back(argv[i]);
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR... (no seed files found)\n", argv[0]);
    return 2;
  }
  size_t inputs = 0;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    inputs += replay(std::string(std::istreambuf_iterator<char>(in), {}));
  }
  std::printf("%zu seed files, %zu inputs, no crash\n", files.size(), inputs);
  return 0;
}
