#version 450
// Quest's page summaries: the per-dim minimum and maximum of the keys of the step's page, from its
// first position to the step's, as the F16 cache holds them (kv_store wrote the step's row just
// before). Read again from the cache each step, so a page the session truncated into holds only the
// keys written since. Of a prompt's tokens (in y), the last of each page in the pass writes its
// page. Bindings: 0 K cache ([heads, n_ctx, head_dim] F16), 1 step, 2 bounds
// ([heads, n_pages, 2, head_dim]: min, max).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer KCache { float16_t k_cache[]; };
layout(std430, binding = 2) writeonly buffer Bounds { float bounds[]; };
layout(push_constant) uniform Push { uint heads, head_dim, n_pages, page, n_ctx; } p;

void main() {
  const uint id = gl_GlobalInvocationID.x;
  const uint pos = uint(STEP.pos);
  const bool last_of_page = (pos + 1u) % p.page == 0u || gl_WorkGroupID.y + 1u == gl_NumWorkGroups.y;
  if (id >= p.heads * p.head_dim || !last_of_page) return;
  const uint g = id / p.head_dim, d = id % p.head_dim, first = pos - pos % p.page;
  float lo = 1.0 / 0.0, hi = -1.0 / 0.0;
  for (uint r = first; r <= pos; ++r) {
    const float v = float(k_cache[(g * p.n_ctx + r) * p.head_dim + d]);
    lo = min(lo, v);
    hi = max(hi, v);
  }
  const uint at = ((g * p.n_pages + pos / p.page) * 2u) * p.head_dim + d;
  bounds[at] = lo;
  bounds[at + p.head_dim] = hi;
}
