// The public API in a few lines: load a model, open a FASA (or dense) context, feed a prompt and
// stream the reply.  Usage: fasa_example_generate MODEL "PROMPT" [PROFILE]
#include <cstdio>
#include <fasa/fasa.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL PROMPT [PROFILE]\n", argv[0]);
    return 2;
  }
  try {
    fasa::Engine engine(argv[1]);
    fasa::ContextOptions options;
    options.n_ctx = 1024;
    if (argc > 3) {  // FASA with a calibrated profile: each head reads 64 of the cached tokens
      options.policy.attn = "fasa";
      options.policy.profile = argv[3];
      options.policy.budget = fasa::Budget::count(64);
    }
    fasa::Context ctx(engine, options);
    ctx.feed(argv[2]);
    fasa::GenerationOptions gen;
    gen.max_tokens = 48;
    gen.stop = {"\n\n"};
    std::printf("%s", argv[2]);
    fasa::GenerationResult r = ctx.generate(gen, [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    const fasa::ContextStats& s = ctx.stats();
    std::printf("\n[%s; %d tokens, %.1f tokens/s; prompt %lld tokens; %s]\n", fasa::name_of(r.finish_reason), r.n_tokens,
                r.n_tokens / s.decode_seconds, (long long)s.prompt_tokens, ctx.policy_summary().c_str());
  } catch (const fasa::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
