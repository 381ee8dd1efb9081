// llama.cpp's spellings of options, and its options that have no meaning here (cli/llama_flags.h).
#include "cli/llama_flags.h"

#include "fasa/error.h"
#include "model/session.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

namespace fasa::cli {

namespace {

struct Alias {
  const char *llama, *ours;
  bool takes_value;
};
constexpr Alias kAliases[] = {
    {"-pg", "--pg", true}, {"-npl", "--n-parallel", true}, {"-ngl", "--n-gpu-layers", true}, {"-dev", "--device", true},
    {"-fa", "--flash-attn", true}, {"-np", "--parallel", true}, {"-ub", "--ubatch-size", true},
    {"-ctk", "--cache-type-k", true}, {"-ctv", "--cache-type-v", true}, {"-sys", "--system-prompt", true},
    {"-mmp", "--mmap", true}, {"-cnv", "--conversation", false}, {"-no-cnv", "--no-conversation", false},
    {"-st", "--single-turn", false}, {"-co", "--color", false}};

// Options whose value is free text, which may itself look like a flag.
bool takes_text(const char* option) {
  for (const char* o : {"-p", "--prompt", "-f", "--file", "-sys", "--system-prompt"})
    if (std::strcmp(option, o) == 0) return true;
  return false;
}

class LlamaNamesFormatter final : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    std::string name = CLI::Formatter::make_option_name(opt, positional);
    for (const Alias& a : kAliases)
      if (!positional && opt->check_lname(a.ours + 2)) return std::string(a.llama) + "," + name;
    return name;
  }
};

// An option of a group that means nothing here: accepted, and the group's note said once, however
// often its options are given.
void ignored(CLI::App* cmd, const std::string& flag, bool takes_value, const std::string& help, const std::string& note) {
  auto say = [note] {
    static std::set<std::string> said;
    if (said.insert(note).second) std::fprintf(stderr, "note: %s\n", note.c_str());
  };
  if (takes_value) cmd->add_option_function<std::string>(flag, [say](const std::string&) { say(); }, help);
  else cmd->add_flag_callback(flag, say, help);
}

}  // namespace

std::vector<char*> with_long_flag_names(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    if (takes_text(args[i - 1])) continue;
    for (const Alias& a : kAliases) {
      if (std::strcmp(args[i], a.llama) != 0) continue;
      const char* next = i + 1 < args.size() ? args[i + 1] : nullptr;
      const bool value_follows = next && (next[0] != '-' || std::isdigit((unsigned char)next[1]));  // -ngl -1 too
      if (a.takes_value && !value_follows) {
        if (std::strcmp(a.llama, "-fa") != 0) throw Error(std::string(a.llama) + " needs a value (" + a.ours + " N)");
        args[i] = const_cast<char*>("--flash-attn=on");  // -fa alone is llama.cpp's "on"
      } else {
        args[i] = const_cast<char*>(a.ours);
      }
    }
  }
  return args;
}

std::shared_ptr<CLI::FormatterBase> help_with_llama_names() { return std::make_shared<LlamaNamesFormatter>(); }

void add_ignored_llama_options(CLI::App* cmd, unsigned groups) {
  if (groups & kGpuFlags) {  // (run and chat take -ngl: they declare it first)
    const bool gpu = cmd->get_option_no_throw("--n-gpu-layers") != nullptr;
    const char* note = gpu ? "-fa is ignored: attention is always fused" : "-ngl / -fa are ignored here: this command runs on the CPU";
    if (!gpu) ignored(cmd, "--n-gpu-layers", true, "Ignored (llama.cpp's -ngl N): CPU only", note);
    ignored(cmd, "--flash-attn", true, "Ignored (llama.cpp's -fa on|off|auto)", note);
  }
  if (groups & kBatchFlags) {
    const std::string chunks = "chunks of " + std::to_string(SessionOptions{}.n_ubatch) + " tokens";
    const std::string note = "-b / -ub are ignored: a prompt goes through in " + chunks;
    ignored(cmd, "-b,--batch-size", true, "Ignored (llama.cpp's -b N): prompts go in " + chunks, note);
    ignored(cmd, "--ubatch-size", true, "Ignored (llama.cpp's -ub N): as -b", note);
  }
  if (groups & kParallelFlag)
    ignored(cmd, "--parallel", true, "Ignored (llama.cpp's -np N): one sequence; `fasa serve -np N` serves several",
            "-np is ignored: one sequence here; `fasa serve -np N` serves several");
  if (groups & kServerFlags) {
    const char* note = "--jinja / --metrics are ignored: the model's chat format applies without --jinja, and "
                       "/metrics is always served";
    ignored(cmd, "--jinja", false, "Ignored (llama-server's): the model's chat format always applies", note);
    ignored(cmd, "--metrics", false, "Ignored (llama-server's): /metrics is always served", note);
  }
}

}  // namespace fasa::cli
