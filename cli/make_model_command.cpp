// `fasa make-model`: a GGUF of a real model's shape with seeded random weights, for `fasa bench`.
#include <cstdio>

#include "cli/commands.h"
#include "bench/synthetic_model.h"
#include "fasa/error.h"

namespace fasa::cli {

namespace {

struct MakeModelOptions {
  std::string shape, type = "q8_0", out;
  uint64_t seed = 1;
};

int make_model(const MakeModelOptions& o) {
  const ModelShape& s = find_model_shape(o.shape);
  const DType type = synthetic_weight_type(o.type);
  write_synthetic_model(s, type, o.out, o.seed);
  std::fprintf(stderr, "wrote %s: %s shape, %s weights (random, seed %llu)\n", o.out.c_str(), s.name.c_str(),
               dtype_name(type), (unsigned long long)o.seed);
  return 0;
}

}  // namespace

Command add_make_model_command(CLI::App& app) {
  auto o = std::make_shared<MakeModelOptions>();
  CLI::App* cmd = app.add_subcommand("make-model", "Write a GGUF of a real model's shape with random weights (for bench)");
  std::string shapes;
  for (const auto& s : model_shapes()) shapes += (shapes.empty() ? "" : "|") + s.name;
  cmd->add_option("--shape", o->shape, shapes)->required();
  cmd->add_option("--type", o->type, "Matrix type: f32|f16|q8_0|q4_0")->capture_default_str();
  cmd->add_option("-o,--output", o->out, "Output .gguf file")->required();
  cmd->add_option("--seed", o->seed, "Weight seed")->capture_default_str();
  return {cmd, [o] { return make_model(*o); }};
}

}  // namespace fasa::cli
