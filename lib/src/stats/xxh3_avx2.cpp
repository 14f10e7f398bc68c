// XXH3 built for AVX2 (this file alone is compiled with -mavx2), called only when the CPU has it.
// Debian's libxxhash is built for baseline x86-64 (SSE2), which hashes about half as fast; the two
// produce the same digests and share the state layout (same xxhash version, same header), so a
// state made by the library can be fed by either. Every function here is renamed ckpt_avx2_*.
#define XXH_STATIC_LINKING_ONLY
#define XXH_IMPLEMENTATION
#define XXH_NAMESPACE ckpt_avx2_
#include <xxhash.h>
