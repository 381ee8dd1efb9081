// The FASA profile loader and the model check on arbitrary JSON, against the bundled model.
#include "calib/profile.h"
#include "fasa/error.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fasa::fuzz::MemFile file("fuzz.profile.json");
  static const auto model = fasa::load_model(FASA_DEFAULT_MODEL);
  const std::string path = file.write({reinterpret_cast<const char*>(data), size});
  try {
    const fasa::Profile p = fasa::load_profile(path);
    fasa::check_profile_matches(p, *model, path);
    for (int l = 0; l < p.model.n_layer; ++l) p.dominant_fcs(l, 0, p.n_tip, fasa::FcSharing::Group, fasa::FcRank::Auto);
  } catch (const fasa::Error&) {
  }
  return 0;
}
