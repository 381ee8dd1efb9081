#pragma once
// Text forms of the settings in include/fasa/options.h that more than one setting reads.
#include <cstddef>
#include <string_view>
#include <vector>

namespace fasa {

// "512M", "2G", "4096": bytes (K/M/G/T are powers of 1024); throws fasa::Error naming `setting`.
size_t parse_byte_size(std::string_view text, std::string_view setting);
// "0,2": layer numbers; "" for none; throws fasa::Error naming `setting`.
std::vector<int> parse_layer_list(std::string_view text, std::string_view setting);

}  // namespace fasa
